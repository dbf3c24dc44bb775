"""A job root's disk cap through a whole training_job run (dag.test, the real local backend: sandbox, `train`,
packing): a job that keeps writing past its cap is stopped while it writes, fails with one line saying why
(failure class disk_limit, the `failure` file at its output path), and publishes no model (issue 47: a job root had no
cap, 2 GiB were written in 3 s)."""

from __future__ import annotations

import re
import textwrap
import time

import pytest

from dag_runner import load_dag, run_dag

pytestmark = [pytest.mark.usefixtures("airflow_db"), pytest.mark.timeout(600)]

# 1 MiB files, one every 50 ms, for 200 MiB in all: no file is ever near the cap, the job root soon is.
WRITER = textwrap.dedent('''
    import os, time
    out = os.environ["TM_MODEL_DIR"]
    for i in range(200):
        with open(os.path.join(out, f"shard-{i:03d}.bin"), "wb") as fh:
            fh.write(os.urandom(1024 * 1024))
        print(f"wrote shard {i}", flush=True)
        time.sleep(0.05)
    print("wrote everything", flush=True)
''')


def test_a_job_writing_past_its_disk_cap_is_stopped_with_one_line(tmp_path, capfd):
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text(WRITER)
    models = tmp_path / "models"
    conf = {"job_name": "disk-cap", "source_dir": str(code), "entry_point": "train.py", "output_path": str(models),
            "resources": {"disk": "16Mi"}, "max_run_seconds": 300}

    started = time.monotonic()
    state, states, values = run_dag(load_dag("training_job.py", "training_job"), conf)
    took = time.monotonic() - started

    assert state == "failed" and states["launch_training"] == "failed", states
    failure = (models / "disk-cap" / "output" / "failure").read_text().strip()
    assert failure.startswith("the job root holds ") and "more than its disk cap of 16.0 MiB" in failure, failure
    assert "\n" not in failure
    assert not (models / "disk-cap" / "output" / "model.tar.gz").exists()
    out = capfd.readouterr()
    log = out.out + out.err
    assert "failed (disk_limit): the job root holds" in log
    assert "The job root may hold 16.0 MiB" in log and "RLIMIT_FSIZE" in log  # how the cap is held here
    assert "wrote everything" not in log  # stopped while it wrote (200 MiB would take 10 s and more)
    shards = [int(n) for n in re.findall(r"wrote shard (\d+)", log)]
    assert shards and max(shards) < 150, log[-3000:]
    assert took < 280  # well before max_run_seconds: the cap stopped it
