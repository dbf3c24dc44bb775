"""Job roots for the local backend's tests: a real layout, config files and a script, as the pipeline writes them."""

from __future__ import annotations

import textwrap
from pathlib import Path

from training_runtime.config import write_config_files
from training_runtime.layouts import create_directories, layout_for

from operators.launch.base import LaunchRequest
from operators.launch.local.launcher import LocalLauncherHook


def make_job(tmp_path: Path, script: str, instance_count: int = 1, max_run_seconds: int | None = 60,
             distribution: str | None = None) -> LaunchRequest:
    launcher = LocalLauncherHook()
    root = tmp_path / "job"
    layout = create_directories(layout_for("ti", root))
    Path(layout.code_dir, "train.py").write_text(textwrap.dedent(script))
    hosts = launcher.hosts("job", instance_count)
    write_config_files(
        layout,
        hyperparameters={},
        resource_config={"current_host": hosts[0], "hosts": hosts},
        input_data_config={},
        job_config={"job_name": "job", "layout": "ti", "entry_point": "train.py", "distribution": distribution,
                    "host_addresses": launcher.host_addresses("job", instance_count),
                    "master_port": launcher.master_port()},
    )
    return LaunchRequest(job_name="job", job_root=str(root), workspace=str(tmp_path), layout="ti",
                         instance_count=instance_count, hosts=tuple(hosts), max_run_seconds=max_run_seconds)
