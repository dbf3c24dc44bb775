"""Pack installed distributions (and what they require) from this interpreter's environment into a tarball.

    python docker/pack_site.py OUT.tar torch==2.13.0

The torch image (docker/torch.Dockerfile) extracts it into /opt/site and puts that on the image's path
with a .pth file. Why not pip inside the build: no registry or PyPI access is assumed for the build
containers, and torch with its CUDA libraries is ~4 GB that the project's venv already holds (the same
Python 3.11 and glibc as the Debian bookworm base), so packing the installed files avoids downloading
it again. Only files the distributions' RECORDs list inside site-packages go in (console scripts outside
it are left out; the Dockerfile adds `torchrun`), without __pycache__. pip and setuptools are not packed:
the image has its own. Prints the tarball's content key (names and versions) on stdout.
"""

from __future__ import annotations

import hashlib
import sys
import tarfile
from importlib.metadata import PackageNotFoundError, distribution

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

SKIP = {"pip", "setuptools", "wheel"}


def closure(roots: list[str]) -> dict:
    """name -> Distribution for the roots and everything they require here (markers evaluated, extras too)."""
    found: dict = {}
    todo = [(Requirement(root), "") for root in roots]
    while todo:
        req, extra = todo.pop()
        name = canonicalize_name(req.name)
        if name in SKIP:
            continue
        if req.marker is not None and not req.marker.evaluate({"extra": extra}):
            continue
        try:
            dist = distribution(req.name)
        except PackageNotFoundError:
            raise SystemExit(f"pack_site: {req.name} is required but not installed in {sys.prefix}") from None
        if not req.specifier.contains(dist.version, prereleases=True):
            raise SystemExit(f"pack_site: {req} is required but {dist.version} is installed in {sys.prefix}")
        extras = [(name, e) for e in req.extras]
        if name in found and not extras:
            continue
        found[name] = dist
        for sub in dist.requires or []:
            sub_req = Requirement(sub)
            if sub_req.marker is None or sub_req.marker.evaluate({"extra": ""}):
                todo.append((sub_req, ""))
            for _, wanted in extras:
                if sub_req.marker is not None and sub_req.marker.evaluate({"extra": wanted}):
                    todo.append((sub_req, wanted))
    return found


def main(out: str, roots: list[str]) -> None:
    dists = closure(roots)
    key = hashlib.sha256(
        "\n".join(f"{n}=={d.version}" for n, d in sorted(dists.items())).encode()
    ).hexdigest()[:16]
    if out == "--key":
        print(key)
        return
    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tar:
        seen = set()
        for name, dist in sorted(dists.items()):
            base = dist.locate_file("")
            for path in dist.files or []:
                text = str(path)
                if text.startswith("..") or "__pycache__" in text or text in seen:
                    continue
                full = dist.locate_file(path)
                if not full.exists():
                    continue
                seen.add(text)
                info = tar.gettarinfo(str(full), arcname=text)
                info.uid = info.gid = 0
                info.uname = info.gname = "root"
                info.mode |= 0o444  # readable by the image's non-root user
                if info.isfile():
                    with open(full, "rb") as handle:
                        tar.addfile(info, handle)
                else:
                    tar.addfile(info)
            print(f"pack_site: {name}=={dist.version} from {base}", file=sys.stderr)
    print(key)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        raise SystemExit("usage: pack_site.py OUT.tar|--key REQUIREMENT...")
    main(sys.argv[1], sys.argv[2:])
