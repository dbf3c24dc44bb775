"""The Docker backend's container bodies (pure): one container per host with the job root, read-only channels,
limits, no privileges, fixed addresses in every /etc/hosts, and credentials only through a mounted file (the
wrapper that loads it is run for real here). What the engine makes of them: tests/integration/test_docker_engine.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from operators.launch.docker.containers import ENV_FILE_WRAPPER, SECRETS_FILE, container_configs, job_addresses
from operators.launch.docker.launcher import DockerLauncherHook
from operators.launch.base import LaunchRequest

IMAGE = "registry.example.com/training-runtime:1.0"


def make_request(tmp_path: Path, job_name="cifar-train", hosts=1, layout="ti", gpu=0, **overrides) -> LaunchRequest:
    workspace = tmp_path / "workspace"
    job_root = workspace / "jobs" / job_name
    (job_root / "output").mkdir(parents=True, exist_ok=True)
    (workspace / "cache" / "ab12").mkdir(parents=True, exist_ok=True)
    values = dict(
        job_name=job_name,
        job_root=str(job_root),
        workspace=str(workspace),
        layout=layout,
        instance_count=hosts,
        hosts=tuple(f"{job_name}-{i}" for i in range(hosts)),
        channel_entries={"train": str(workspace / "cache" / "ab12")},
        image_uri=IMAGE,
        resources={"cpu": "1500m", "memory": "16Gi", "gpu": gpu},
        max_run_seconds=3600,
        env={"TM_LOG_LEVEL": "INFO"},
        options={},
    )
    values.update(overrides)
    return LaunchRequest(**values)


@pytest.mark.parametrize("hosts", [1, 4])
@pytest.mark.parametrize(
    ("layout", "root"),
    [("ti", "/opt/ml"), ("sagemaker", "/opt/ml"), ("pai", "/ml"), ("modelarts", "/home/ma-user/modelarts")],
)
def test_one_container_per_host_with_the_job_root_read_only_channels_and_no_privileges(tmp_path, hosts, layout, root):
    request = make_request(tmp_path, hosts=hosts, layout=layout, gpu=2)
    addresses = job_addresses("172.30.0.0/16", "172.30.0.1", hosts)
    configs = container_configs(request, image=IMAGE, user="1000:1000", addresses=addresses)
    hook = DockerLauncherHook(docker_url="tcp://127.0.0.1:1")
    names = [f"cifar-train-{i}" for i in range(hosts)]
    assert [c["name"] for c in configs] == hook.hosts(request.job_name, hosts) == names
    for index, config in enumerate(configs):
        name = names[index]
        assert config["Cmd"] == ["train", "--root", root, "--current-host", name]
        assert config["Hostname"] == name and config["User"] == "1000:1000"
        endpoint = {"Aliases": [name], "IPAMConfig": {"IPv4Address": f"172.30.0.{index + 2}"}}
        assert config["NetworkingConfig"] == {"EndpointsConfig": {"cifar-train": endpoint}}
        host = config["HostConfig"]
        assert host["NetworkMode"] == "cifar-train"
        assert host["ExtraHosts"] == [f"cifar-train-{i}:172.30.0.{i + 2}" for i in range(hosts)]
        assert host["Binds"] == [
            f"{request.job_root}:{root}:rw",
            f"{request.channel_entries['train']}:{root}/input/data/train:ro",
        ]
        assert host["Memory"] == 16 * 2**30 and host["NanoCpus"] == 1_500_000_000
        assert host["DeviceRequests"] == [{"Driver": "", "Count": 2, "Capabilities": [["gpu"]]}]
        assert host["CapDrop"] == ["ALL"] and host["SecurityOpt"] == ["no-new-privileges"] and host["Init"] is True
        assert config["Labels"]["airflow-training-jobs/host-index"] == str(index)
        assert "TRAINING_ROOT=" + root in config["Env"]


@pytest.mark.parametrize(("pids_limit", "expected"), [(64, 64), (4096, 4096), (0, None)])
def test_the_pids_limit_is_in_every_host_config_and_0_means_none(tmp_path, pids_limit, expected):
    configs = container_configs(make_request(tmp_path, hosts=2), image=IMAGE, user="1000:1000", pids_limit=pids_limit)
    assert [config["HostConfig"].get("PidsLimit") for config in configs] == [expected, expected]


def test_a_literal_credential_is_refused_without_echoing_it_and_host_paths_are_translated(tmp_path):
    request = make_request(tmp_path, env={"AWS_SECRET_ACCESS_KEY": "abc/def+ghi"})
    with pytest.raises(ValueError, match="AWS_SECRET_ACCESS_KEY looks like a credential.*secret_variables") as err:
        container_configs(request, image=IMAGE, user="1000:1000")
    assert "abc/def+ghi" not in str(err.value)
    request = make_request(tmp_path)
    request = LaunchRequest.from_dict(
        {**request.to_dict(), "env": {"TRAINING_METRICS_FILE": f"{request.job_root}/output/metrics.jsonl"}}
    )
    config = container_configs(request, image=IMAGE, user="1000:1000", host_workspace="/srv/airflow/workspace")[0]
    assert config["HostConfig"]["Binds"][0] == "/srv/airflow/workspace/jobs/cifar-train:/opt/ml:rw"
    assert "TRAINING_METRICS_FILE=/opt/ml/output/metrics.jsonl" in config["Env"]
    with pytest.raises(ValueError, match="resources.memory is 'lots'"):
        container_configs(make_request(tmp_path, resources={"memory": "lots"}), image=IMAGE, user="1")


def test_credentials_come_as_a_read_only_file_and_a_wrapper_never_as_values(tmp_path):
    request = make_request(tmp_path, hosts=2)
    secrets_file = os.path.join(request.workspace, "state", "cifar-train", "secrets", "env.json")
    configs = container_configs(request, image=IMAGE, user="1000:1000", secrets_file=secrets_file,
                                host_workspace="/srv/ws")
    for index, config in enumerate(configs):
        assert config["Cmd"] == ["python3", "-c", ENV_FILE_WRAPPER, SECRETS_FILE,
                                 "train", "--root", "/opt/ml", "--current-host", f"cifar-train-{index}"]
        assert f"/srv/ws/state/cifar-train/secrets/env.json:{SECRETS_FILE}:ro" in config["HostConfig"]["Binds"]


def test_the_wrapper_loads_the_file_into_the_environment_and_execs_the_command(tmp_path):
    secrets = tmp_path / "env.json"
    secrets.write_text(json.dumps({"API_TOKEN": "tok 'quoted' $x", "OTHER": "2"}))
    shown = subprocess.run(
        [sys.executable, "-c", ENV_FILE_WRAPPER, str(secrets),
         sys.executable, "-c", "import json, os, sys; print(json.dumps([os.environ['API_TOKEN'], sys.argv[1:]]))",
         "a b"],
        capture_output=True, text=True, check=True, env={"PATH": os.environ["PATH"]},
    ).stdout
    assert json.loads(shown) == ["tok 'quoted' $x", ["a b"]]


def test_job_addresses_skip_the_gateway_and_check_room():
    assert job_addresses("10.9.0.0/24", "10.9.0.1", 3) == ["10.9.0.2", "10.9.0.3", "10.9.0.4"]
    assert job_addresses("10.9.0.0/24", "10.9.0.254", 2) == ["10.9.0.1", "10.9.0.2"]
    with pytest.raises(ValueError, match="no room for 3 hosts"):
        job_addresses("10.9.0.0/30", "10.9.0.1", 3)


def test_each_host_gets_exactly_its_leased_gpus(tmp_path, monkeypatch):
    # No GPU here: files stand in for the device nodes the worker hands out (operators/launch/worker_slots.py).
    for i in range(4):
        (tmp_path / f"nvidia{i}").write_text("")
    monkeypatch.setenv("AIRFLOW__TRAINING__LOCAL_GPU_DEVICES", str(tmp_path / "nvidia[0-9]*"))
    first = make_request(tmp_path, job_name="first", hosts=2, gpu=1)
    second = make_request(tmp_path, job_name="second", hosts=1, gpu=2)
    launcher = DockerLauncherHook(docker_url="unix://var/run/docker.sock", pids_limit=0)
    ids = [launcher._lease_gpus(first), DockerLauncherHook(docker_url="unix://var/run/docker.sock")._lease_gpus(second)]
    assert ids == [[["0"], ["1"]], [["2", "3"]]]
    configs = launcher.configs(first, gpu_ids=ids[0])
    assert [c["HostConfig"]["DeviceRequests"] for c in configs] == [
        [{"Driver": "", "DeviceIDs": ["0"], "Capabilities": [["gpu"]]}],
        [{"Driver": "", "DeviceIDs": ["1"], "Capabilities": [["gpu"]]}]]
    # A remote engine's GPUs are not the worker's: the engine picks them (a count).
    remote = DockerLauncherHook(docker_url="tcp://gpu-box:2376")
    assert remote._lease_gpus(make_request(tmp_path, job_name="third", gpu=1)) is None
    assert remote.configs(make_request(tmp_path, job_name="third", gpu=1))[0]["HostConfig"]["DeviceRequests"] == [
        {"Driver": "", "Count": 1, "Capabilities": [["gpu"]]}]
