"""The metrics echo: a real `train` process with TRAINING_METRICS_ECHO=1 copies every point its script (and the
system sampler) appends to output/metrics.jsonl into its stdout, whole lines beside the script's own output, and the
platform's collector reads them back from that stream alone (what the kubernetes backend's cluster data plane sees)."""

from __future__ import annotations

import io
import json
from pathlib import Path

from training_runtime import metrics_echo
from training_runtime.contract import METRIC_LINE_PREFIX

from operators.tracking.metrics import MetricCollector

# Prints a partial line around its metric writes: an echoed line must never land inside it.
SCRIPT = """\
import json, os, sys, time
path = os.environ["TRAINING_METRICS_FILE"]
for step in range(3):
    sys.stdout.write("epoch %d " % step); sys.stdout.flush()
    with open(path, "a") as f:
        f.write(json.dumps({"name": "loss", "value": 1.0 / (step + 1), "step": step}) + "\\n")
    time.sleep(1.2)
    print("done loss_text=%d" % step, flush=True)
with open(path, "a") as f:  # the last point, written as the script ends: it goes out too
    f.write(json.dumps({"name": "accuracy", "value": 0.9, "step": 2}) + "\\n")
"""


def test_train_echoes_each_point_into_its_output_and_the_collector_reads_them_from_the_log(make_job):
    job = make_job(code={"train.py": SCRIPT})
    metrics_file = Path(job.root, "output", "metrics.jsonl")
    result = job.run(env={"TRAINING_METRICS_ECHO": "1", "TRAINING_SYSTEM_METRICS_SECONDS": "0.5",
                          "TRAINING_METRICS_FILE": str(metrics_file)})
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert [line for line in lines if "loss_text" in line] == [f"epoch {i} done loss_text={i}" for i in range(3)]
    echoed = [line for line in lines if METRIC_LINE_PREFIX in line]
    assert all(line.startswith(METRIC_LINE_PREFIX) for line in echoed), echoed  # whole lines, never inside one

    collector = MetricCollector([{"Name": "loss_text", "Regex": "loss_text=([0-9]+)"}], echoed=True)
    shown = [line for line in lines if not collector.feed(line)]
    assert [p["value"] for p in collector.series["loss"]] == [1.0, 0.5, 1.0 / 3]
    assert collector.series["accuracy"] == [{"value": 0.9, "step": 2, "timestamp": collector.series["accuracy"][0]
                                             ["timestamp"]}]
    assert collector.series["system/algo-1/cpu_percent"]  # the sampler's points too
    assert [p["value"] for p in collector.series["loss_text"]] == [0.0, 1.0, 2.0]  # the log's matching goes on
    assert not any(METRIC_LINE_PREFIX in line for line in shown)  # consumed, not shown in the task log


def test_without_the_variable_nothing_is_echoed(make_job):
    job = make_job(code={"train.py": SCRIPT})
    result = job.run(env={"TRAINING_METRICS_FILE": str(Path(job.root, "output", "metrics.jsonl"))})
    assert result.returncode == 0, result.stderr
    assert METRIC_LINE_PREFIX not in result.stdout


def test_the_echo_follows_only_the_file_and_only_complete_lines(tmp_path):
    path = tmp_path / "metrics.jsonl"
    out = io.BytesIO()
    echo = metrics_echo.Echo(str(path), out)
    echo.copy_new_lines()  # no file yet: nothing, no error
    path.write_bytes(b'{"name": "a", "value": 1}\n{"name": "a", "val')
    echo.copy_new_lines()
    assert out.getvalue() == (METRIC_LINE_PREFIX + '{"name": "a", "value": 1}\n').encode()
    with path.open("ab") as f:
        f.write(b'ue": 2}\n\n')
    echo.copy_new_lines()
    assert out.getvalue().decode().splitlines()[1] == METRIC_LINE_PREFIX + json.dumps({"name": "a", "value": 2})

    (tmp_path / "elsewhere").write_text('{"name": "secret", "value": 1}\n')
    path.unlink()
    path.symlink_to(tmp_path / "elsewhere")  # a link at the file's name is not followed
    echo.copy_new_lines()
    assert b"secret" not in out.getvalue()
