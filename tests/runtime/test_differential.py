"""Differential tests: `train` against the real ti-containers (TI-ONE) and sagemaker-training on
the same job roots with the same user scripts. A script must not be able to tell them apart:
argv, cwd, every variable the peer sets, the exit-code class and the success/failure files.
The figure (checks matched / total per peer) is printed at the end of the session; the latest
one is in runtime/README.md. The peers' venvs are built once (tests/runtime/peers/build.py).
"""

from __future__ import annotations

import json
import os
import shutil
import sys

import pytest

import peer_runtimes as peers
from peer_runtimes import Case

needs_mount_namespace = pytest.mark.skipif(
    shutil.which("unshare") is None or os.geteuid() != 0,
    reason="ti-containers only works in /opt/ml: needs root and unshare (util-linux) for a private mount namespace",
)

# Hyperparameters as the TI SDK writes them: every value JSON-encoded (strings get quotes).
TI_SDK = {
    "optimizer": json.dumps("adam"),
    "epochs": json.dumps(10),
    "lr": json.dumps(0.001),
    "shuffle": json.dumps(True),
    "dropout": json.dumps(None),
    "layers": json.dumps([64, 32]),
    "schedule": json.dumps({"warmup": 2, "decay": "cosine"}),
    "note": json.dumps("a b; touch pwned $(id) 'q'"),
}
# Plain strings, as a person or another SDK writes them.
PLAIN = {
    "optimizer": "adam",
    "epochs": "10",
    "lr": "1e-3",
    "momentum": "0.90",
    "shuffle": "true",
    "verbose": "False",
    "no-shuffle": "",
    "blank": "  ",
    "k": "3",
    "batch-size": "64",
    "train.max_steps": "100",
    "label": "héllo wörld",
    "count": "007",
    "neg": "-5",
}


def _cases(program_key):
    def program(name="train.py"):
        return {program_key: json.dumps(name)}

    return [
        Case("sdk-encoded", {**TI_SDK, **program()}),
        Case("plain-strings", {**PLAIN, program_key: "train.py"}),
        Case("channels", {"epochs": "2", **program()},
             channels={"train": "dir", "validation": "file", "test-set": "file", "extra_1": "dir"}),
        Case("no-hyperparameters-no-channels", program(), channels={}),
        Case("failing-script", {"epochs": "1", **program("fail.py")}, script="fail.py"),
        Case("two-hosts", {"epochs": "1", "lr": "0.1", **program()}, hosts=("algo-1", "algo-2")),
    ]


TI_CASES = _cases("ti_program")
SM_CASES = _cases("sagemaker_program") + [
    # Not a .py: sagemaker-training makes it executable and runs /bin/sh -c "./train.sh <quoted args>".
    Case("shell-entry-point", {**PLAIN, "note": json.dumps("a b; touch pwned $(id)"),
                               "sagemaker_program": json.dumps("train.sh")}, script="train.sh"),
    Case("submit-dir-with-code-present", {"epochs": "1", "sagemaker_program": json.dumps("train.py")}, code="code"),
    Case("submit-local-dir", {"epochs": "1", "sagemaker_program": json.dumps("train.py")}, code="local-dir"),
    Case("submit-local-tar", {"epochs": "1", "sagemaker_program": json.dumps("train.py")}, code="local-tar"),
    Case("submit-s3-tar", {"epochs": "1", "sagemaker_program": json.dumps("train.py")}, code="s3"),
]


@pytest.fixture(scope="module")
def ti_python():
    return peers.peer_python("ti-containers")


@pytest.fixture(scope="module")
def sm_python():
    return peers.peer_python("sagemaker-training")


def _assert_all_matched(peer, case, host, checks, observed):
    # Vacuous comparisons are no evidence: the peer must have run the script.
    assert observed.record is not None, "%s did not run the script of case %s:\n%s" % (
        peer, case.name, observed.stderr[-3000:])
    peers.SCOREBOARD.add(peer, sum(ok for _, ok, _ in checks), len(checks))
    mismatches = ["%s: %s" % (what, detail) for what, ok, detail in checks if not ok]
    assert not mismatches, "%s, case %s, host %s: %d of %d checks differ:\n  %s" % (
        peer, case.name, host, len(mismatches), len(checks), "\n  ".join(mismatches))


@needs_mount_namespace
@pytest.mark.parametrize("case", TI_CASES, ids=lambda c: c.name)
def test_same_as_ti_containers(case, ti_python, tmp_path):
    root, record = tmp_path / "root", tmp_path / "record.json"
    # Hosts of a plain TI root do not resolve here; ti-containers never looks them up.
    env = peers.base_env(tmp_path, record, {"TRAINING_HOST_WAIT_SECONDS": "0"})
    for host in case.hosts:
        peers.write_root(root, case, host)
        peers.write_code(root / "code", case)
        peer = peers.observe(peers.run(peers.ti_command(ti_python, peers.PEER_MAINS["ti-containers"], root), env),
                             root, record)
        record.unlink(missing_ok=True)
        peers.reset_outputs(root, case)
        ours = peers.observe(peers.run(peers.ti_command(sys.executable, peers.OURS_MAIN, root), env), root, record)
        record.unlink(missing_ok=True)
        peers.reset_outputs(root, case)
        _assert_all_matched("ti-containers", case, host, peers.compare(env, peer, ours), peer)
    assert not list(root.rglob("pwned*")), "a hyperparameter value was executed"


@pytest.mark.parametrize("case", SM_CASES, ids=lambda c: c.name)
def test_same_as_sagemaker_training(case, sm_python, tmp_path, request):
    root, record = tmp_path / "root", tmp_path / "record.json"
    extra = {"SAGEMAKER_BASE_DIR": str(root), "SM_STUDIO_LOCAL_MODE": "true"}
    submit = None
    if case.code in ("local-dir", "local-tar", "s3"):
        source = tmp_path / "source"
        peers.write_code(source, case)
        if case.code == "local-dir":
            submit = str(source)
        else:
            tarball = tmp_path / "sourcedir.tar.gz"
            peers.make_tarball(source, tarball)
            submit = str(tarball)
            if case.code == "s3":
                moto = request.getfixturevalue("moto_server")
                client = moto.client()
                bucket = "submit-%s" % tmp_path.name.lower().replace("_", "-")[-40:]
                client.create_bucket(Bucket=bucket)
                client.upload_file(str(tarball), bucket, "jobs/j1/source/sourcedir.tar.gz")
                submit = "s3://%s/jobs/j1/source/sourcedir.tar.gz" % bucket
                extra.update({"S3_ENDPOINT_URL": moto.url, "AWS_ACCESS_KEY_ID": moto.access_key,
                              "AWS_SECRET_ACCESS_KEY": moto.secret_key, "AWS_DEFAULT_REGION": "us-east-1"})
    elif case.name == "submit-dir-with-code-present":
        submit = "s3://nowhere/never-fetched/sourcedir.tar.gz"
    env = peers.base_env(tmp_path, record, extra)
    for host in case.hosts:
        peers.write_root(root, case, host, submit=submit)
        if case.code == "code":
            peers.write_code(root / "code", case)
        peer = peers.observe(peers.run([sm_python, "-c", "import sys; " + peers.PEER_MAINS["sagemaker-training"]],
                                       env, cwd=tmp_path), root, record)
        record.unlink(missing_ok=True)
        peers.reset_outputs(root, case)
        ours = peers.observe(peers.run([sys.executable, "-c", "import sys; " + peers.OURS_MAIN], env, cwd=tmp_path),
                             root, record)
        record.unlink(missing_ok=True)
        peers.reset_outputs(root, case)
        _assert_all_matched("sagemaker-training", case, host, peers.compare(env, peer, ours), peer)
    assert not list(root.rglob("pwned*")), "a hyperparameter value was executed"
