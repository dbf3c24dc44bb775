"""Running the real TI-ONE and SageMaker runtimes ("peers") and ours on the same job root, and
comparing what a user script observes (tests/runtime/test_differential.py).

Each peer runs from its own pinned venv (tests/runtime/peers/build.py) through its own entry
point: `from ti_containers.train import main` / `from sagemaker_training.cli.train import main`
(both install a console script named `train`). Ours runs through `training_runtime.cli.main`.

What each peer needs outside its platform (documented in runtime/README.md):
* ti-containers reads and writes only /opt/ml (hard-coded), and runs `python <ti_program>`
  relative to its working directory, which the TI image sets to /opt/ml/code. So it runs in a
  private mount namespace (`unshare --mount`) with a tmpfs on /opt and the job root bind-mounted
  at /opt/ml, from /opt/ml/code. Ours runs the same way, with its default root.
* sagemaker-training takes the root from SAGEMAKER_BASE_DIR (else /opt/ml, else it makes a
  fresh ~/sagemaker_local/jobs/<time>/opt/ml), and before the user code starts it retries
  `gethostbyname` of every host for 15 minutes unless SM_STUDIO_LOCAL_MODE=true. An S3
  submit directory is fetched with boto3 from S3_ENDPOINT_URL with the AWS_* credentials.

The same base environment goes to the peer and to ours; a variable "the peer sets" is one
whose value in the user script differs from that base environment.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

import training_runtime
from training_runtime.errors import failure_class

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "runtime" / "peers"))
import build as peer_build  # noqa: E402  (tests/runtime/peers/build.py)

PEER_VERSIONS = {"ti-containers": "1.2.22", "sagemaker-training": "5.1.4"}
PEER_MAINS = {
    "ti-containers": "from ti_containers.train import main; sys.exit(main())",
    "sagemaker-training": "from sagemaker_training.cli.train import main; sys.exit(main())",
}
OURS_MAIN = "sys.path.insert(0, %r); from training_runtime.cli import main; sys.exit(main())" % str(
    Path(training_runtime.__file__).resolve().parents[1]
)
TI_ROOT = "/opt/ml"
# The TI peer's whole world: a private /opt with the job root at /opt/ml, cwd /opt/ml/code.
IN_OPT_ML = (
    'mount -t tmpfs tmpfs /opt && mkdir /opt/ml && mount --bind "$0" /opt/ml && mkdir -p /opt/ml/code '
    '&& cd /opt/ml/code && exec "$@"'
)

# The user script: records what it sees, then fails with a message if asked to (by its name).
RECORDER = """\
import json, os, sys
with open(os.environ["DIFF_RECORD"], "w") as f:
    json.dump({"argv": sys.argv, "cwd": os.getcwd(), "env": dict(os.environ)}, f)
if os.path.basename(__file__).startswith("fail"):
    print("the data is corrupt: 3 bad rows", file=sys.stderr)
    sys.exit(3)
"""


# The same for a shell entry point (sagemaker-training runs it via /bin/sh -c "./train.sh ...");
# the recording Python is named by its path so that nothing on PATH changes the environment.
SHELL_RECORDER = """\
#!/bin/sh
exec %s - "$0" "$@" <<'END'
import json, os, sys
with open(os.environ["DIFF_RECORD"], "w") as f:
    json.dump({"argv": sys.argv[1:], "cwd": os.getcwd(), "env": dict(os.environ)}, f)
END
""" % sys.executable


@dataclass
class Case:
    """One job root: hyperparameters exactly as in hyperparameters.json (strings)."""

    name: str
    hyperparameters: dict
    channels: dict = field(default_factory=lambda: {"train": "dir"})  # name -> "dir" | "file"
    hosts: tuple = ("algo-1",)
    script: str = "train.py"
    #: "code" (code/ holds the script), "local-dir", "local-tar" or "s3" (code/ empty, the
    #: script only at sagemaker_submit_directory)
    code: str = "code"


@dataclass
class Observation:
    exit_code: int
    record: dict | None
    success: str | None
    failure: str | None
    stderr: str


@dataclass
class Scoreboard:
    """Checks matched / total per peer, for the figure printed at the end of the session."""

    results: dict = field(default_factory=dict)  # peer -> [matched, total]

    def add(self, peer, matched, total):
        entry = self.results.setdefault(peer, [0, 0])
        entry[0] += matched
        entry[1] += total

    def lines(self):
        return [
            "%s %s: %d/%d checks matched" % (peer, PEER_VERSIONS[peer], matched, total)
            for peer, (matched, total) in sorted(self.results.items())
        ]


#: Filled by the differential tests; printed by tests/runtime/conftest.py at the end of the session.
SCOREBOARD = Scoreboard()


def peer_python(peer):
    return os.path.join(peer_build.build(peer), "bin", "python")


def write_root(root: Path, case: Case, current_host: str, submit: str | None = None):
    """A plain TI / SageMaker job root (no trainingjobconfig.json: the peers know none)."""
    for sub in ("input/config", "code", "model", "output/data"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    hps = dict(case.hyperparameters)
    if submit:
        hps["sagemaker_submit_directory"] = json.dumps(submit)
    (root / "input/config/hyperparameters.json").write_text(json.dumps(hps, indent=1))
    (root / "input/config/resourceconfig.json").write_text(
        json.dumps({"current_host": current_host, "hosts": list(case.hosts), "network_interface_name": "eth0"})
    )
    idc = {}
    for channel, kind in case.channels.items():
        directory = root / "input/data" / channel
        directory.mkdir(parents=True, exist_ok=True)
        if kind == "file":
            (directory / "data.csv").write_text("a,b\n1,2\n")
            idc[channel] = {"TrainingInputMode": "File", "S3DistributionType": "FullyReplicated",
                            "RecordWrapperType": "None", "ContentType": "text/csv"}
        else:
            (directory / "part-0" / "nested").mkdir(parents=True, exist_ok=True)
            (directory / "part-0" / "nested" / "x.txt").write_text("x")
            idc[channel] = {"TrainingInputMode": "File", "S3DistributionType": "FullyReplicated",
                            "RecordWrapperType": "None"}
    (root / "input/config/inputdataconfig.json").write_text(json.dumps(idc))


def write_code(directory: Path, case: Case):
    directory.mkdir(parents=True, exist_ok=True)
    (directory / case.script).write_text(SHELL_RECORDER if case.script.endswith(".sh") else RECORDER)


def make_tarball(source: Path, target: Path):
    with tarfile.open(target, "w:gz") as tar:
        for path in sorted(source.iterdir()):
            tar.add(path, arcname=path.name)


def reset_outputs(root: Path, case: Case):
    """Between the peer's run and ours: nothing the first run left may be seen by the second."""
    for name in ("success", "failure"):
        (root / "output" / name).unlink(missing_ok=True)
    for path in (root / "output" / "data").iterdir():
        if path.is_file():
            path.unlink()
    if case.code != "code":  # the peer fetched the submit directory into code/: empty it again
        shutil.rmtree(root / "code")
        (root / "code").mkdir()


def base_env(home: Path, record: Path, extra: dict | None = None) -> dict:
    env = {
        "PATH": os.environ.get("PATH", os.defpath),
        "HOME": str(home),  # no ~/.aws, ~/.config of the machine
        "LANG": "C.UTF-8",
        "DIFF_RECORD": str(record),
    }
    env.update(extra or {})
    return env


def run(command, env, cwd=None, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def ti_command(python: str, main: str, root: Path):
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", IN_OPT_ML, str(root), python, "-c",
            "import sys; " + main]


def observe(result: subprocess.CompletedProcess, root: Path, record: Path) -> Observation:
    def read(path):
        return path.read_text() if path.exists() else None

    data = json.loads(record.read_text()) if record.exists() else None
    return Observation(
        exit_code=result.returncode,
        record=data,
        success=read(root / "output" / "success"),
        failure=read(root / "output" / "failure"),
        stderr=result.stderr,
    )


def compare(peer_env: dict, peer: Observation, ours: Observation) -> list[tuple[str, bool, str]]:
    """The checks: (what, matched, detail)."""
    checks = []

    def check(what, peer_value, our_value, matched=None):
        ok = peer_value == our_value if matched is None else matched
        checks.append((what, ok, "" if ok else "peer %r, ours %r" % (peer_value, our_value)))

    peer_failed = peer.exit_code != 0
    check("exit class", failure_class(peer.exit_code) if peer_failed else None,
          failure_class(ours.exit_code),
          (ours.exit_code == 0) if not peer_failed else failure_class(ours.exit_code) == "user_error")
    check("success file", peer.success, ours.success)
    check("failure file exists", peer.failure is not None, ours.failure is not None)
    if peer.failure is not None and ours.failure is not None and peer.record is not None:
        # Ours is more informative: it carries the script's own last stderr lines.
        check("failure file names the script's error", True, "the data is corrupt" in ours.failure)
    check("user code ran", peer.record is not None, ours.record is not None)
    if peer.record is None or ours.record is None:
        return checks
    check("argv", peer.record["argv"], ours.record["argv"])
    check("cwd", peer.record["cwd"], ours.record["cwd"])
    peer_child, our_child = peer.record["env"], ours.record["env"]
    for name in sorted(set(peer_child) | set(peer_env)):
        if peer_child.get(name) == peer_env.get(name):
            continue  # not set by the peer
        peer_value, our_value = peer_child.get(name), our_child.get(name)
        if name == "PYTHONPATH" and peer_value:
            # The peer puts its own sys.path there (its venv); what a script relies on is the
            # code directory first (documented difference: ours does not leak its own path).
            check("env " + name + " (code dir first)", peer_value.split(":")[0],
                  (our_value or "").split(":")[0])
            continue
        check("env " + name, peer_value, our_value)
    return checks
