"""A local source_dir must hold the entry point: checked by validate_spec, so a typo fails in the first stage with
one line naming the field, instead of at launch after the code was staged and the data fetched.

Only what the worker can see cheaply is checked: a local directory (the name is looked up without following a link
there; the runtime decides what a link means) and a local .tar.gz (the SDK's upload: its member names are listed,
nothing is extracted). Object-storage sources are checked when the code is staged."""

from __future__ import annotations

import os
import tarfile

from operators.jobspec.model import JobSpec, SpecError


def check_entry_point(spec: JobSpec) -> None:
    if not spec.entry_point or ("://" in spec.source_dir and not spec.source_dir.startswith("file://")):
        return
    source = os.path.abspath(spec.source_dir.removeprefix("file://"))
    if os.path.isdir(source):
        if not os.path.lexists(os.path.join(source, spec.entry_point)):
            raise SpecError("entry_point", f"{spec.entry_point} is not in source_dir {source}; give a file that is "
                                           "there (a path relative to source_dir)")
    elif source.endswith((".tar.gz", ".tgz")) and os.path.isfile(source):
        try:
            with tarfile.open(source, "r:gz") as archive:
                names = {name.removeprefix("./") for name in archive.getnames()}
        except (OSError, tarfile.TarError, EOFError):
            return  # a damaged archive is refused, with its own reason, when the code is staged
        if spec.entry_point not in names:
            raise SpecError("entry_point", f"{spec.entry_point} is not in the code archive {source}; give a file "
                                           "of the uploaded source_dir")
