"""System metrics: a real `train` process samples its cgroup into output/metrics.jsonl while the user code runs, and
the worker's metrics path (operators/tracking/metrics.py) reads them like any script-written point."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from training_runtime import system_metrics

# Busy for ~2 s (CPU for the sampler to see), then a point of its own in the same file.
BUSY_SCRIPT = """\
import json, os, time
end = time.monotonic() + 2.5
while time.monotonic() < end:
    sum(i * i for i in range(10000))
with open(os.environ["TRAINING_METRICS_FILE"], "a") as f:
    f.write(json.dumps({"name": "loss", "value": 0.5, "step": 0}) + "\\n")
"""


def test_train_samples_cpu_and_memory_into_the_metrics_stream(make_job):
    job = make_job(code={"train.py": BUSY_SCRIPT})
    metrics_file = Path(job.root, "output", "metrics.jsonl")
    result = job.run(env={"TRAINING_SYSTEM_METRICS_SECONDS": "0.5", "TRAINING_METRICS_FILE": str(metrics_file)})
    assert result.returncode == 0, result.stderr

    from operators.tracking.metrics import MetricCollector

    collector = MetricCollector()
    collector.read_file(metrics_file, job_root=str(job.root))
    series = collector.series
    assert series["loss"][0]["value"] == 0.5  # the script's own line, intact beside the sampler's
    cpu = series["system/algo-1/cpu_percent"]
    assert len(cpu) >= 2 and [p["step"] for p in cpu] == list(range(len(cpu)))
    assert max(p["value"] for p in cpu) > 10  # the busy loop shows
    assert all(p["value"] > 0 for p in series["system/algo-1/memory_bytes"])


def test_sampling_is_off_with_zero_seconds(make_job):
    job = make_job(code={"train.py": "import time; time.sleep(1.5)\n"})
    result = job.run(env={"TRAINING_SYSTEM_METRICS_SECONDS": "0"})
    assert result.returncode == 0, result.stderr
    assert not Path(job.root, "output", "metrics.jsonl").exists()


def test_gpus_come_from_nvidia_smi_when_it_exists(tmp_path, monkeypatch):
    """nvidia-smi's CSV (the real query's format, a GPU that reports [N/A] skipped); no nvidia-smi: no GPU points."""
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\n"
                    "test \"$1 $2\" = '--query-gpu=index,utilization.gpu,memory.used,memory.total "
                    "--format=csv,noheader,nounits' || exit 3\n"
                    "printf '0, 87, 30000, 81559\\n1, [N/A], [N/A], 81559\\n'\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    sample = system_metrics.gpu_sample()
    assert sample == {"gpu0_utilization_percent": 87.0, "gpu0_memory_bytes": 30000 * 1024 * 1024,
                      "gpu0_memory_percent": 100.0 * 30000 / 81559}
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert system_metrics.gpu_sample() == {}


def test_a_sample_is_whole_json_lines_named_by_host(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"name": "loss", "value": 1, "step": 0}\n')
    sampler = system_metrics.Sampler(str(path), "algo-2", gpus=dict)
    sampler.write({"cpu_percent": 50.0, "memory_bytes": 1024.0})
    sampler.write({"cpu_percent": 75.0})
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(p["name"], p["value"], p["step"]) for p in lines[1:]] == [
        ("system/algo-2/cpu_percent", 50.0, 0), ("system/algo-2/memory_bytes", 1024.0, 0),
        ("system/algo-2/cpu_percent", 75.0, 1)]
