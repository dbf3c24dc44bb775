"""Stage a job's code into its job directory: from a prefix, a .tar.gz object, a local dir or a local .tar.gz.

The destination (the layout's code dir, e.g. <job root>/code) is replaced atomically: the new tree is
built in a temporary directory in the same parent and swapped into place, so a retried task or a
concurrent reader never sees half a code tree, and a refused archive leaves the previous tree intact.
Archives are extracted with `operators.fs.safe_tar.safe_extract` (regular files and directories only,
bounded size and member count, the offending member named on refusal).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile

from operators.storage.hook import (
    ObjectStorageHook,
    StorageError,
    TransferStats,
    parse_uri,
)
from operators.fs.directories import replace_directory
from operators.fs.safe_tar import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_MEMBERS,
    BadArchiveError,
    safe_extract,
)

log = logging.getLogger(__name__)

ARCHIVE_SUFFIXES = (".tar.gz", ".tgz")


def _is_archive_name(name: str) -> bool:
    return name.lower().endswith(ARCHIVE_SUFFIXES)


def stage_code(
    hook: ObjectStorageHook,
    source_dir: str,
    dest_dir: str,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_members: int = DEFAULT_MAX_MEMBERS,
) -> TransferStats:
    """Make `dest_dir` an exact copy of the code at `source_dir`; returns what was transferred.

    `source_dir`: s3://bucket/prefix/ (a tree of objects), s3://bucket/code.tar.gz (an archive object),
    a local directory, or a local .tar.gz (any supported scheme instead of s3://). Raises StorageError
    (storage problems, nothing at the URI) or UnsafeArchiveError / BadArchiveError (bad archives).
    """
    loc = parse_uri(source_dir)
    dest_dir = os.path.abspath(dest_dir)
    parent = os.path.dirname(dest_dir)
    os.makedirs(parent, exist_ok=True)
    listing = hook.describe(source_dir)
    store = hook.store(loc)
    where = store.name(loc)
    if not listing.objects:
        raise StorageError(f"no code at {where}{store.via}: no such file, directory, object or prefix; check source_dir",
                           permanent=True)
    work = tempfile.mkdtemp(prefix=f".{os.path.basename(dest_dir)}.staging-", dir=parent)
    try:
        tree = os.path.join(work, "tree")
        if not listing.is_prefix and _is_archive_name(listing.objects[0].relative_path):
            archive = store.local_path(loc)  # extracted in place when the store has it as a file
            if archive is not None:
                stats = TransferStats(files=1, bytes=listing.total_bytes)
            else:
                archive = os.path.join(work, "code.tar.gz")
                stats = hook.download_listing(listing, archive)
            try:
                extracted = safe_extract(archive, tree, max_bytes=max_bytes, max_members=max_members)
            except BadArchiveError as err:
                # Name the source URI, not our temporary download path.
                raise type(err)(str(err).replace(archive, where)) from None
            log.info("staged code from archive %s into %s: %d files, %d bytes", where, dest_dir, extracted.files,
                     extracted.bytes)
        else:
            # A single non-archive object becomes the only file of the code dir (e.g. s3://b/train.py).
            target = tree if listing.is_prefix else os.path.join(tree, listing.objects[0].relative_path)
            os.makedirs(tree, exist_ok=True)
            stats = hook.download_listing(listing, target)
        os.chmod(tree, 0o755)
        replace_directory(tree, dest_dir)
        return stats
    finally:
        shutil.rmtree(work, ignore_errors=True)
