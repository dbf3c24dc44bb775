"""docker/training.Dockerfile: the image runs a job root as uid 1000 with `train`."""

import json
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
IMAGE = "training-base:latest"  # built by `make images` (docker/build-images.sh), a dependency of `make test`


def _docker_works():
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


@pytest.fixture(scope="module")
def image():
    if not _docker_works():
        pytest.skip("no Docker engine (make engine starts one)")
    # Up to date already when `make images` ran; rebuilt (without a registry, from the local
    # Debian base) only when the runtime or the Dockerfile changed since.
    subprocess.run([str(REPO / "docker/build-images.sh"), "training"], cwd=REPO, check=True, timeout=900)
    return IMAGE


def _open_for_uid_1000(root: Path):
    for directory, _, files in os.walk(root):
        os.chmod(directory, 0o777)
        for name in files:
            os.chmod(os.path.join(directory, name), 0o666)


def test_image_runs_a_ti_job_as_non_root(image, make_job):
    script = (
        "import json, os\n"
        "open(os.path.join(os.environ['TM_MODEL_DIR'], 'model.json'), 'w').write("
        "json.dumps({'uid': os.getuid(), 'cwd': os.getcwd()}))\n"
    )
    job = make_job(code={"train.py": script}, hyperparameters={"epochs": 1})
    _open_for_uid_1000(job.root)
    result = subprocess.run(
        ["docker", "run", "--rm", "-v", "%s:/opt/ml" % job.root, image],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr
    model = json.loads((job.root / "model/model.json").read_text())
    assert model["uid"] == 1000
    assert model["cwd"] == "/opt/ml/code"
    assert (job.root / "output/success").exists()


def test_image_refuses_an_invalid_job_with_exit_code_2(image, make_job):
    job = make_job(entry_point="missing.py")
    _open_for_uid_1000(job.root)
    result = subprocess.run(
        ["docker", "run", "--rm", "-v", "%s:/opt/ml" % job.root, image],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 2
    assert "entry point 'missing.py'" in (job.root / "output/failure").read_text()


def test_image_runs_a_plain_sagemaker_root(image, make_job):
    # What SageMaker mounts: no trainingjobconfig.json, the script named by sagemaker_program.
    script = (
        "import json, os, sys\n"
        "json.dump({'argv': sys.argv, 'hp': os.environ['SM_HP_OPTIMIZER'], 'module': os.environ['SM_MODULE_NAME']},"
        " open(os.path.join(os.environ['SM_MODEL_DIR'], 'seen.json'), 'w'))\n"
    )
    job = make_job(code={"train.py": script}, entry_point=None,
                   hyperparameters={"sagemaker_program": '"train.py"', "optimizer": '"adam"', "b": "2"})
    (job.root / "input/config/trainingjobconfig.json").unlink()
    _open_for_uid_1000(job.root)
    result = subprocess.run(
        ["docker", "run", "--rm", "-v", "%s:/opt/ml" % job.root, image],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr
    seen = json.loads((job.root / "model/seen.json").read_text())
    assert seen == {"argv": ["train.py", "-b", "2", "--optimizer", "adam"], "hp": "adam", "module": "train"}
    assert (job.root / "output/success").read_text() == ""
