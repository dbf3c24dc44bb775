"""The real node's images: no registry, so they come from the local Docker engine (`docker save | ctr images import`).

containerd's content store and snapshots (its `root`) are kept in the tools cache, one per node index
(`$TOOLS_CACHE/node/containerd-N`), not in the node's directory: an image is imported once per machine and index,
then found by its ID by every later node of that index (training-torch is 5 GB: minutes to import, seconds to find).
The index is unique among the nodes running on this machine (realnode.py picks a free bridge trnN), so no two
containerds ever share a store. The pause image is a static Go binary built here (tools/node/pause).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent
TOOLS_CACHE = Path(os.environ.get("TOOLS_CACHE", Path.home() / ".cache/training-jobs"))
PAUSE_IMAGE = "localhost/training-pause:local"


def log(message: str) -> None:
    print(f"[node] {message}", flush=True)


def image_store(index: int) -> Path:
    """containerd's root for the node of this index (kept between nodes; see the module docstring)."""
    return TOOLS_CACHE / "node" / f"containerd-{index}"


def import_images(ctr: Callable[..., subprocess.CompletedProcess], socket: Path, images: list[str]) -> None:
    """Copy images from the local Docker engine into the node's containerd, skipped when this image ID is there."""
    present = present_image_ids(ctr)
    for image in images:
        if image == PAUSE_IMAGE:
            build_pause_image()
        image_id = _run("docker", "image", "inspect", "--format", "{{.Id}}", image).stdout.strip()
        if image_id in present:
            continue
        size = int(_run("docker", "image", "inspect", "--format", "{{.Size}}", image).stdout.strip() or 0)
        log(f"importing {image} ({image_id[:19]}, {size / 1e9:.1f} GB) into the node's containerd; once per machine")
        started = time.monotonic()
        save = subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE)
        result = subprocess.run(["ctr", "-a", str(socket), "-n", "k8s.io", "images", "import", "-"],
                                stdin=save.stdout, capture_output=True, text=True)
        save.stdout.close()
        if save.wait() != 0 or result.returncode != 0:
            raise RuntimeError(f"importing {image} into containerd failed: {result.stderr.strip()}")
        log(f"imported {image} in {time.monotonic() - started:.1f}s")


def present_image_ids(ctr: Callable[..., subprocess.CompletedProcess]) -> set[str]:
    """Docker image IDs (config digests) of the images in the store. The CRI plugin adds a `sha256:<ID>` name for
    the images it has indexed, but not at once for a fresh import: read each manifest's config digest too."""
    ids = set()
    for line in ctr("images", "ls").stdout.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 3:
            continue
        if fields[0].startswith("sha256:"):
            ids.add(fields[0])
            continue
        try:
            ids.add(json.loads(ctr("content", "get", fields[2]).stdout)["config"]["digest"])
        except (ValueError, KeyError, TypeError, subprocess.CalledProcessError):
            pass  # an index or a foreign media type: not one of ours, imported from a docker save
    return ids


def build_pause_image() -> None:
    """localhost/training-pause:local in the Docker engine: a static Go binary in an empty image."""
    source = HERE / "pause"
    out = TOOLS_CACHE / "node" / "pause"
    out.mkdir(parents=True, exist_ok=True)
    binary = out / "pause"
    stamp = out / "source.sha"
    digest = _run("sh", "-c", f"cat {source}/*.go {source}/Dockerfile | sha256sum").stdout.split()[0]
    have = _run("docker", "image", "inspect", PAUSE_IMAGE, check=False).returncode == 0
    if have and binary.exists() and stamp.exists() and stamp.read_text() == digest:
        return
    _run("go", "build", "-trimpath", "-ldflags=-s -w", "-o", str(binary), ".", cwd=source,
         env={**os.environ, "CGO_ENABLED": "0"})
    shutil.copy(source / "Dockerfile", out / "Dockerfile")
    _run("docker", "build", "-q", "-t", PAUSE_IMAGE, str(out))
    stamp.write_text(digest)


def _run(*cmd: str, check: bool = True, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=check, text=True, capture_output=True, **kwargs)
