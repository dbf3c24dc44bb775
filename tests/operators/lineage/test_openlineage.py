"""operators/lineage/openlineage.py against the real openlineage client and Airflow provider: a run's lineage becomes
the provider's OperatorLineage (code and channels in, with their versions; the model out, with its lineage facet), the
provider's adapter makes the COMPLETE event of it, a transport the client ships sends it (a file; HTTP to a receiver on
loopback, configured as airflow.cfg's [openlineage] transport), and what arrives validates against OpenLineage's
RunEvent schema and the platform's facet schemas (operators/lineage/facets/).

The schemas and the validation: tests/operators/lineage/openlineage_schema.py.
"""

from __future__ import annotations

import json
import threading
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jsonschema
import pytest
from airflow.providers.openlineage.extractors import OperatorLineage

from operators.lineage.openlineage import CHANNEL_FACET, LINEAGE_FACET, dataset_id, operator_lineage
from tests.operators.lineage.openlineage_schema import validate_event


def complete_event(adapter, lineage: OperatorLineage):
    """The provider's COMPLETE event of the publish task of the sample run, sent through the adapter's client."""
    when = datetime(2026, 2, 2, 1, 2, 3, tzinfo=timezone.utc)
    run_id = adapter.build_task_instance_run_id(dag_id="training_job", task_id="publish_model", try_number=1,
                                                logical_date=when, map_index=-1)
    return adapter.complete_task(run_id=run_id, job_name="training_job.publish_model", end_time=when.isoformat(),
                                 task=lineage, nominal_start_time=None, nominal_end_time=None, owners=["alice"],
                                 tags=None, job_description=None)


def test_dataset_names_follow_the_naming_spec():
    assert dataset_id("s3://data/churn/train/") == ("s3://data", "churn/train")
    assert dataset_id("s3://data/churn/train") == ("s3://data", "churn/train")  # one dataset, with or without "/"
    assert dataset_id("s3://models/churn/j/output/model.tar.gz") == ("s3://models", "churn/j/output/model.tar.gz")
    # the spec names no cos/oss/obs: their own scheme, so a bucket of one name on two stores stays two datasets
    assert dataset_id("cos://eu-data/churn/validation.csv") == ("cos://eu-data", "churn/validation.csv")
    assert dataset_id("oss://b/k") == ("oss://b", "k") and dataset_id("obs://b/k/") == ("obs://b", "k")
    assert dataset_id("/srv/data/train/") == ("file", "/srv/data/train")
    assert dataset_id("file:///srv/data/x.csv") == ("file", "/srv/data/x.csv")
    assert dataset_id("s3://whole-bucket") == ("s3://whole-bucket", "/")


def test_the_run_reports_code_and_channels_in_and_the_model_out(sample):
    record = sample.sample_record()
    lineage = operator_lineage(record)
    assert isinstance(lineage, OperatorLineage)  # what get_openlineage_facets_on_complete returns
    inputs = {(d.namespace, d.name): d for d in lineage.inputs}
    assert set(inputs) == {("s3://code", "churn/v3"), ("s3://data", "churn/train"),
                           ("cos://eu-data", "churn/validation.csv"),
                           ("s3://models", "churn/churn-20260101-000000-abcd/output/model.tar.gz")}
    assert inputs["s3://code", "churn/v3"].facets["version"].datasetVersion == sample.CODE_DIGEST
    train = inputs["s3://data", "churn/train"]
    assert train.facets["version"].datasetVersion == sample.TRAIN_VERSION
    assert train.inputFacets[CHANNEL_FACET].channel == "train"
    assert train.inputFacets["inputStatistics"].fileCount == 120
    assert inputs["cos://eu-data", "churn/validation.csv"].facets["version"].datasetVersion == \
        sample.VALIDATION_VERSION
    [model] = lineage.outputs
    assert (model.namespace, model.name) == ("s3://models", "churn/churn-20260202-010203-beef/output/model.tar.gz")
    assert {(i.namespace, i.name) for i in model.facets["lineage"].inputs} == set(inputs)
    facet = model.facets[LINEAGE_FACET]
    assert facet.lineageUri == record.published_uri and facet.imageDigest == sample.IMAGE_DIGEST
    assert facet.dataVersions == {"train": sample.TRAIN_VERSION, "validation": sample.VALIDATION_VERSION}


def test_each_stage_reports_its_own_part(sample):
    record = sample.sample_record()
    assert [(d.namespace, d.name) for d in operator_lineage(record, "stage_code").inputs] == [("s3://code", "churn/v3")]
    assert len(operator_lineage(record, "prefetch_data").inputs) == 2
    assert operator_lineage(record, "prefetch_data").outputs == []
    assert [d.name for d in operator_lineage(record, "restore").inputs] == [
        "churn/churn-20260101-000000-abcd/output/model.tar.gz"]
    assert len(operator_lineage(record, "upload_artifacts").outputs) == 1
    assert operator_lineage(record, "launch_training") == OperatorLineage()
    failed = sample.sample_record(upload={"status": "failed", "model_uri": None, "artifacts": {}})
    assert operator_lineage(failed).outputs == []  # no model, no output dataset


def test_events_through_the_file_transport_validate_and_link_the_model_to_its_inputs(sample, tmp_path):
    from airflow.providers.openlineage.plugins.adapter import OpenLineageAdapter
    from openlineage.client import OpenLineageClient
    from openlineage.client.transport.file import FileConfig, FileTransport

    path = tmp_path / "events.jsonl"
    client = OpenLineageClient(transport=FileTransport(FileConfig(log_file_path=str(path), append=True)))
    complete_event(OpenLineageAdapter(client=client), operator_lineage(sample.sample_record()))
    [line] = path.read_text().splitlines()
    event = json.loads(line)
    validate_event(event)
    assert event["eventType"] == "COMPLETE" and event["job"]["name"] == "training_job.publish_model"
    [model] = event["outputs"]
    sources = {(i["namespace"], i["name"]) for i in model["facets"]["lineage"]["inputs"]}
    assert sources == {(i["namespace"], i["name"]) for i in event["inputs"]}
    versions = {i["name"]: i["facets"]["version"]["datasetVersion"] for i in event["inputs"] if "version" in i["facets"]}
    assert versions == {"churn/v3": sample.CODE_DIGEST, "churn/train": sample.TRAIN_VERSION,
                        "churn/validation.csv": sample.VALIDATION_VERSION}
    assert model["facets"][LINEAGE_FACET]["lineageUri"].endswith("/output/lineage.json")


def test_a_facet_that_breaks_its_schema_is_caught(sample):
    """The validation itself can fail: a channel facet without its channel, an event without a producer."""
    from openlineage.client.serde import Serde

    event = {"eventType": "COMPLETE", "eventTime": "2026-02-02T01:02:03+00:00", "producer": "https://x.example/p",
             "schemaURL": "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent",
             "run": {"runId": "01890000-0000-7000-8000-000000000000"}, "job": {"namespace": "n", "name": "j"},
             "inputs": [Serde.to_dict(d) for d in operator_lineage(sample.sample_record(), "prefetch_data").inputs]}
    validate_event(event)
    del event["inputs"][0]["inputFacets"][CHANNEL_FACET]["channel"]
    with pytest.raises(jsonschema.ValidationError, match="'channel' is a required property"):
        validate_event(event)
    with pytest.raises(jsonschema.ValidationError, match="'producer' is a required property"):
        validate_event({k: v for k, v in event.items() if k not in ("producer", "inputs")})


class _Receiver(BaseHTTPRequestHandler):
    received: list = []

    def do_POST(self):  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        type(self).received.append((self.path, self.headers.get("Content-Type"), body))
        self.send_response(201)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def receiver():
    _Receiver.received = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server, _Receiver.received
    server.shutdown()
    server.server_close()


def test_events_reach_an_http_receiver_configured_as_the_providers_transport(sample, receiver, monkeypatch):
    """airflow.cfg's [openlineage] transport (here its environment form) is what the provider's adapter sends by."""
    from airflow.providers.openlineage.plugins.adapter import OpenLineageAdapter

    server, received = receiver
    url = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setenv("AIRFLOW__OPENLINEAGE__TRANSPORT", json.dumps({"type": "http", "url": url,
                                                                        "endpoint": "api/v1/lineage"}))
    # (the provider's conf reads airflow.cfg afresh under pytest: it caches nothing there)
    adapter = OpenLineageAdapter()
    complete_event(adapter, operator_lineage(sample.sample_record()))
    assert adapter.get_or_create_openlineage_client().transport.kind == "http"
    [(path, content_type, body)] = received
    assert path == "/api/v1/lineage" and content_type.startswith("application/json")
    event = json.loads(body)
    validate_event(event)
    assert {i["name"] for i in event["outputs"][0]["facets"]["lineage"]["inputs"]} >= {"churn/v3", "churn/train"}


def test_the_providers_extractor_takes_it_from_an_operators_on_complete_hook(sample):
    """What a stage will do once wired: return operator_lineage(...) from get_openlineage_facets_on_complete; the
    provider's ExtractorManager (what its listener calls when a task ends) accepts it as the task's lineage."""
    from types import SimpleNamespace

    from airflow.providers.openlineage.extractors.manager import ExtractorManager
    from airflow.sdk import BaseOperator
    from airflow.utils.state import TaskInstanceState

    record = sample.sample_record()

    class PublishStage(BaseOperator):
        def get_openlineage_facets_on_complete(self, task_instance):
            return operator_lineage(record, "publish_model")

    task = PublishStage(task_id="publish_model")
    found = ExtractorManager().extract_metadata(dagrun=SimpleNamespace(run_id="manual__1"), task=task,
                                                task_instance_state=TaskInstanceState.SUCCESS,
                                                task_instance=SimpleNamespace())
    assert [(d.namespace, d.name) for d in found.outputs] == [
        ("s3://models", "churn/churn-20260202-010203-beef/output/model.tar.gz")]
    assert len(found.inputs) == 4 and LINEAGE_FACET in found.outputs[0].facets
