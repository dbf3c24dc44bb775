"""operators/lineage/code_digest.py: the same staged code gives the same digest wherever and whenever it is staged; any
change of content, name, tree or executable bit gives another; links are never followed."""

from __future__ import annotations

import hashlib
import json
import os
import time

from operators.lineage.code_digest import code_digest
from operators.settings import TrainingSettings
from operators.staging.code import stage_code
from operators.storage.hook import ObjectStorageHook

FILES = {"train.py": b"import lib\nprint('training')\n", "lib/__init__.py": b"", "lib/model.py": b"W = 1\n",
         "run.sh": b"#!/bin/sh\npython train.py\n"}


def make_tree(root, files=FILES, order=None, executable=("run.sh",)):
    for rel in order or files:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(files[rel])
        os.chmod(path, 0o755 if rel in executable else 0o644)
    return root


def test_the_digest_is_sha256_over_sorted_paths_modes_and_content(tmp_path):
    root = make_tree(tmp_path / "code")
    lines = sorted([("lib", 'd "lib"\n')] + [
        (rel, f"f {json.dumps(rel)} {'x' if rel == 'run.sh' else '-'} {hashlib.sha256(data).hexdigest()}\n")
        for rel, data in FILES.items()])
    expected = "sha256:" + hashlib.sha256("".join(line for _rel, line in lines).encode()).hexdigest()
    found = code_digest(root)
    assert found.digest == expected
    assert (found.files, found.bytes) == (4, sum(len(d) for d in FILES.values()))


def test_the_same_code_staged_twice_gives_the_same_digest(tmp_path):
    first = make_tree(tmp_path / "a")
    time.sleep(0.01)
    second = make_tree(tmp_path / "b", order=list(reversed(FILES)))  # other times, other creation order, other inodes
    assert code_digest(first) == code_digest(second)


def test_each_change_gives_another_digest(tmp_path):
    base = code_digest(make_tree(tmp_path / "base")).digest
    changed = dict(FILES, **{"lib/model.py": b"W = 2\n"})
    renamed = {("lib/net.py" if k == "lib/model.py" else k): v for k, v in FILES.items()}
    moved = {("model.py" if k == "lib/model.py" else k): v for k, v in FILES.items()}
    digests = {
        "content": code_digest(make_tree(tmp_path / "content", changed)).digest,
        "name": code_digest(make_tree(tmp_path / "name", renamed)).digest,
        "tree": code_digest(make_tree(tmp_path / "tree", moved)).digest,
        "mode": code_digest(make_tree(tmp_path / "mode", executable=())).digest,
    }
    empty_dir = make_tree(tmp_path / "empty")
    (empty_dir / "data").mkdir()
    digests["empty dir"] = code_digest(empty_dir).digest
    assert base not in digests.values()
    assert len(set(digests.values())) == len(digests)


def test_links_are_not_followed(tmp_path):
    secret = tmp_path / "outside" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text("not the tenant's\n")
    plain = code_digest(make_tree(tmp_path / "plain")).digest
    linked = make_tree(tmp_path / "linked")
    os.symlink(secret, linked / "secret.txt")
    os.symlink(secret.parent, linked / "outside")
    os.symlink(secret, linked / "lib" / "model2.py")
    found = code_digest(linked)
    assert found.digest == plain  # neither the links nor what they point at are part of it
    assert found.files == len(FILES)


def test_staged_code_has_the_digest_of_its_source_tree(tmp_path):
    source = make_tree(tmp_path / "src")
    hook = ObjectStorageHook(settings=TrainingSettings(workspace=str(tmp_path / "ws")))
    stage_code(hook, str(source), str(tmp_path / "job" / "code"))
    again = tmp_path / "job2" / "code"
    stage_code(hook, str(source), str(again))
    staged = code_digest(tmp_path / "job" / "code")
    assert staged == code_digest(again) == code_digest(source)
    assert (staged.files, staged.bytes) == (4, sum(len(d) for d in FILES.values()))
