"""The data-plane step's engine side (operators/engine/step.py): a payload of primitives runs the stage's engine
function; the outcome is a result, a skip, a failure or an error; and none of it imports Airflow."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from operators.engine.step import STAGES, run_stage
from operators.lineage.code_digest import code_digest

ROOT = Path(__file__).resolve().parents[3]


def _payload(ctx, stage: str, **inputs) -> dict:
    return {"stage": stage, "job": ctx.job, "owner": ctx.owner, "dag_id": ctx.dag_id, "run_id": ctx.run_id,
            "inputs": inputs}


def test_the_five_transfer_stages_run_as_steps():
    assert sorted(STAGES) == ["prefetch_data", "restore", "stage_code", "upload_artifacts", "write_configs"]


def test_a_payload_runs_its_stage_and_says_its_outcome(make_context, monkeypatch):
    monkeypatch.setattr("operators.engine.transfers.JobContext.check_owner_records", lambda self: None)
    ctx = make_context()
    said = run_stage(_payload(ctx, "stage_code"), settings=ctx.settings)
    # the step computes the staged code's digest itself: the cluster's lineage names the code it staged
    assert said == {"result": {"code_dir": ctx.layout.code_dir, "files": 1, "bytes": len("print('training')\n"),
                               "code_digest": code_digest(ctx.layout.code_dir).digest}}
    said = run_stage(_payload(ctx, "write_configs", channels={}), settings=ctx.settings)
    assert said["result"]["hosts"] == ["algo-1"]
    assert run_stage(_payload(ctx, "upload_artifacts"), settings=ctx.settings) == {
        "skip": "training did not run (an earlier stage failed): nothing to upload"}
    assert list(run_stage(_payload(ctx, "no_such_stage"), settings=ctx.settings)) == ["error"]


def test_a_stage_run_from_the_engine_imports_no_airflow(tmp_path):
    """What the step's pod and the SDK's local mode run: the engine, a stage on a local store, no Airflow."""
    code = textwrap.dedent(f"""
        import json, os, sys
        root = {str(tmp_path)!r}
        os.makedirs(root + "/code")
        open(root + "/code/train.py", "w").write("print(1)\\n")
        os.makedirs(root + "/data")
        open(root + "/data/rows.csv", "w").write("1\\n")
        from operators.engine.step import run_stage
        from operators.jobspec.model import JobSpec
        from operators.settings import TrainingSettings
        job = JobSpec.model_validate({{"job_name": "plain", "source_dir": root + "/code", "entry_point": "train.py",
                                       "output_path": root + "/out", "backend": "local", "layout": "ti",
                                       "inputs": {{"train": root + "/data"}}}}).to_dict()
        settings = TrainingSettings(workspace=root + "/workspace")
        from operators.engine.context import JobContext
        from operators.engine.transfers import stage_code
        stage_code(JobContext(job, dag_id="d", run_id="r", settings=settings))
        said = {{}}
        for stage in ("prefetch_data", "write_configs", "restore", "upload_artifacts"):
            said[stage] = run_stage({{"stage": stage, "job": job, "dag_id": "d", "run_id": "r", "inputs": {{}}}},
                                    settings=settings)
        print(json.dumps({{"said": said, "airflow": sorted(m for m in sys.modules if m.split(".")[0] == "airflow")}}))
    """)
    env = {"PYTHONPATH": f"{ROOT}:{ROOT / 'runtime'}", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["airflow"] == []
    assert report["said"]["prefetch_data"]["result"]["train"]["uri"].endswith("/data")
    assert report["said"]["write_configs"]["result"]["hosts"] == ["algo-1"]
    assert report["said"]["restore"] == {"result": {"checkpoint_files": 0, "resumed_from": None}}
    assert "skip" in report["said"]["upload_artifacts"]


def test_the_upload_step_carries_the_kept_lineage_record_to_the_worker(make_context, monkeypatch, tmp_path):
    """The worker cannot read the cluster's workspace (nor, holding no storage credentials, the published copy): the
    upload step's result carries the kept record, which the worker keeps when its sha256 is what was published."""
    import os

    from operators.engine import transfers
    from operators.lineage.record import LINEAGE_CARRIED, keep_carried, read_record

    monkeypatch.setattr("operators.engine.transfers.JobContext.check_owner_records", lambda self: None)
    ctx = make_context()
    transfers.stage_code(ctx)
    os.makedirs(ctx.layout.model_dir, exist_ok=True)
    with open(os.path.join(ctx.layout.model_dir, "weights.bin"), "w") as handle:
        handle.write("w")
    os.makedirs(ctx.layout.output_dir, exist_ok=True)
    open(os.path.join(ctx.layout.output_dir, "success"), "w").close()
    result = run_stage(_payload(ctx, "upload_artifacts"), settings=ctx.settings)["result"]
    assert result["status"] == "succeeded" and result[LINEAGE_CARRIED]
    assert len(json.dumps({"result": result}, separators=(",", ":"))) <= 4096  # a termination message holds it
    worker = str(tmp_path / "worker-ws")
    kept = keep_carried(worker, result[LINEAGE_CARRIED], result["lineage_sha256"], ctx.spec.job_name)
    assert kept == read_record(worker, ctx.spec.job_name) and kept.outcome.model_uri == result["model_uri"]


def test_a_cache_hit_step_takes_the_validated_spec_without_pydantic(tmp_path):
    """The step's process reads the spec the worker validated without building the model (operators/jobspec/
    validated.py), and a cache hit imports neither the archive code nor the botocore engine: what a step pays before
    its first byte is its start-up (bench/README.md, "The cluster's steps on the job engine")."""
    from operators.jobspec.model import JobSpec

    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "rows.csv").write_text("1\n")
    job = JobSpec.model_validate({"job_name": "hit", "source_dir": str(tmp_path / "code"), "entry_point": "train.py",
                                  "output_path": str(tmp_path / "out"), "inputs": {"train": str(tmp_path / "data")},
                                  }).to_dict()
    code = textwrap.dedent(f"""
        import json, os, sys
        from operators.engine.step import run_stage
        from operators.settings import TrainingSettings
        settings = TrainingSettings(workspace={str(tmp_path / "workspace")!r})
        job = json.loads({json.dumps(job)!r})
        os.makedirs(settings.job_root(job["job_name"]))
        payload = {{"stage": "prefetch_data", "job": job, "dag_id": "d", "run_id": "r", "inputs": {{}}}}
        said = [run_stage(payload, settings=settings) for _ in range(2)]
        bad = run_stage({{**payload, "job": {{**job, "job_name": "../elsewhere"}}}}, settings=settings)
        loaded = [m for m in ("pydantic", "isal", "s3transfer", "operators.fs.safe_tar") if m in sys.modules]
        print(json.dumps({{"said": said, "bad": bad, "loaded": loaded}}))
    """)
    env = {"PYTHONPATH": f"{ROOT}:{ROOT / 'runtime'}", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert [said["result"]["train"]["files"] for said in report["said"]] == [1, 1]
    assert report["said"][0]["result"]["train"]["data_version"] == report["said"][1]["result"]["train"]["data_version"]
    assert report["bad"] == {"fail": "invalid job spec: job_name: '../elsewhere' is not a DNS-1123 label (the worker "
                                     "validates it; a step's payload must carry the validated spec)"}
    assert report["loaded"] == []
