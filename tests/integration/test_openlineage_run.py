"""A real training_job run reports its lineage through the openlineage provider's listener: `airflow dags test`
(local backend, code and one channel in the loopback S3) with the provider configured by its own settings to the
client's file transport; the events in the file validate against OpenLineage's RunEvent schema and the platform's
facet schemas (tests/operators/lineage/openlineage_schema.py), and the upload's event links the model to the code and
the channel with the versions the run's own stages report.

The run is a CLI subprocess, not dag.test in this process: the provider decides at import whether it is on
(plugins/openlineage.py builds its listener only `if not conf.is_disabled()`, i.e. when a transport is set), and
Airflow caches the plugins and both listener managers (airflow.sdk.listener / airflow.listeners.listener
get_listener_manager are functools.cache'd) for the life of a process: a pytest worker that ran a DAG before has no
OpenLineage listener, and one that had it would keep it for every later test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dag_runner import put_code
from operators.lineage.openlineage import CHANNEL_FACET, LINEAGE_FACET
from tests.operators.lineage.openlineage_schema import validate_event

pytestmark = [pytest.mark.usefixtures("airflow_db"), pytest.mark.timeout(600)]  # a CLI run: 1-3 min under load
REPO = Path(__file__).resolve().parents[2]
STAGES = ("stage_code", "prefetch_data", "upload_artifacts", "publish_model")

SCRIPT = textwrap.dedent('''
    import json, os
    rows = open(os.path.join(os.environ["TM_CHANNEL_TRAIN"], "rows.csv")).read().split()
    print("loss=0.5", flush=True)
    json.dump({"rows": len(rows)}, open(os.path.join(os.environ["TM_MODEL_DIR"], "model.json"), "w"))
''')


def latest_run(dag_id: str = "training_job"):
    """The latest run's (run_id, state, conf, {task_id: return value})."""
    from airflow.models.dagrun import DagRun
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        run = session.scalars(select(DagRun).where(DagRun.dag_id == dag_id).order_by(DagRun.id.desc())).first()
        rows = session.scalars(XComModel.get_many(run_id=run.run_id, dag_ids=dag_id, key="return_value")).all()
        return run.run_id, run.state, run.conf or {}, {row.task_id: XComModel.deserialize_value(row) for row in rows}


def test_a_runs_openlineage_events_validate_and_link_the_model_to_its_inputs(storage_connections, object_store,
                                                                           tmp_path):
    bucket = object_store.bucket()
    put_code(object_store, bucket, {"train.py": SCRIPT})
    object_store.put(bucket, "data/train/rows.csv", b"1\n2\n3\n")
    conf = {"job_name": "ol-run", "source_dir": f"s3://{bucket}/code/", "entry_point": "train.py",
            "inputs": {"train": f"s3://{bucket}/data/train/"}, "output_path": f"s3://{bucket}/models"}
    events_file = tmp_path / "ol.jsonl"
    env = {**os.environ,  # the session's AIRFLOW_HOME and DB, and the storage connections (storage_connections)
           # the provider's own settings, as an admin sets them (docs/tracking.md "OpenLineage"): for this run only
           "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps({"type": "file", "log_file_path": str(events_file),
                                                         "append": True}),
           "AIRFLOW__OPENLINEAGE__NAMESPACE": "training-platform-test",
           # the listener emits each task's event from a child it waits for at most this long (default 10 s): a
           # hang guard here, so a loaded machine does not drop an event
           "AIRFLOW__OPENLINEAGE__EXECUTION_TIMEOUT": "300"}
    proc = subprocess.run([sys.executable, "-m", "airflow", "dags", "test", "training_job", "--conf", json.dumps(conf)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=540)
    output = proc.stdout[-3000:] + proc.stderr[-3000:]
    run_id, state, run_conf, values = latest_run()
    assert run_conf.get("job_name") == "ol-run" and state == "success", output

    events = [json.loads(line) for line in events_file.read_text().splitlines()] if events_file.exists() else []
    assert events, f"the provider wrote no event\n{output}"
    for event in events:
        validate_event(event)
    assert {e["job"]["namespace"] for e in events} == {"training-platform-test"}
    # the task events of this run (the parent facet names its DAG run), by task
    complete = {e["job"]["name"].removeprefix("training_job."): e for e in events
                if e["eventType"] == "COMPLETE" and e["job"]["name"].startswith("training_job.")
                and e["run"]["facets"].get("airflow", {}).get("dagRun", {}).get("run_id") == run_id}
    assert set(STAGES) <= set(complete), sorted(complete)

    code_digest = values["stage_code"]["code_digest"]
    data_version = values["prefetch_data"]["train"]["data_version"]
    assert code_digest.startswith("sha256:") and len(data_version) == 64
    code = (f"s3://{bucket}", "code")
    channel = (f"s3://{bucket}", "data/train")

    def inputs(stage):
        return {(d["namespace"], d["name"]): d for d in complete[stage].get("inputs", [])}

    assert inputs("stage_code")[code]["facets"]["version"]["datasetVersion"] == code_digest
    train = inputs("prefetch_data")[channel]
    assert train["facets"]["version"]["datasetVersion"] == data_version
    assert train["inputFacets"][CHANNEL_FACET]["channel"] == "train"
    assert train["inputFacets"][CHANNEL_FACET]["dataVersion"] == data_version

    upload = complete["upload_artifacts"]
    assert set(inputs("upload_artifacts")) == {code, channel}
    [model] = upload["outputs"]
    assert (model["namespace"], model["name"]) == (f"s3://{bucket}", "models/ol-run/output/model.tar.gz")
    assert {(i["namespace"], i["name"]) for i in model["facets"]["lineage"]["inputs"]} == {code, channel}
    facet = model["facets"][LINEAGE_FACET]
    assert facet["codeDigest"] == code_digest and facet["dataVersions"] == {"train": data_version}
    assert facet["jobName"] == "ol-run" and facet["runId"] == run_id
    assert facet["lineageUri"] == values["upload_artifacts"]["lineage_uri"]
    # publish_model reports the same model, made from the same code and data versions
    [published] = complete["publish_model"]["outputs"]
    assert (published["namespace"], published["name"]) == (model["namespace"], model["name"])
    assert published["facets"][LINEAGE_FACET]["codeDigest"] == code_digest
    assert published["facets"][LINEAGE_FACET]["dataVersions"] == {"train": data_version}
