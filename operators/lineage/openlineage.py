"""A run's lineage as OpenLineage datasets: what a stage operator's `get_openlineage_facets_on_complete(task_instance)`
returns, so the openlineage provider (the listener Airflow's own operators report through) sends it to the admin's
Marquez, DataHub or any other OpenLineage backend ([openlineage] transport in airflow.cfg).

    inputs   the code (source_dir) with its digest, each channel with its data version, and the parent model
    outputs  the model (model.tar.gz) with the standard `lineage` facet naming those inputs, and a
             `trainingLineage` facet: the record's own facts and where the whole record is published

Facets: the spec's DatasetVersionDatasetFacet (`version`) carries the code digest and the data versions (what a
backend shows as the dataset's version); InputStatisticsInputDatasetFacet (`inputStatistics`) a channel's object count
and bytes; LineageDatasetFacet (`lineage`) the model's inputs. The platform's own facets, `trainingChannel` and
`trainingLineage`, have their JSON schemas in operators/lineage/facets/ (their `_schemaURL` names them).

Dataset naming (OpenLineage's naming spec: namespace = scheme://authority, name = path): s3://bucket/key is namespace
`s3://bucket`, name `key`, as the spec says. cos://, oss:// and obs:// (Tencent COS, Alibaba OSS, Huawei OBS) have no
entry in the spec; they keep their own scheme (`cos://bucket`, name `key`) by the spec's general rule, not `s3://`:
they are other stores, and a bucket of one name on two of them is two datasets (s3:// would merge them). A prefix and
the same prefix with a trailing `/` are one dataset (the slash is dropped). Local paths are namespace `file`, name the
absolute path (the client's LocalFileSystem naming).

The openlineage client and provider are imported by the functions (the optional extra `lineage`), never here.
"""

from __future__ import annotations

import functools
from typing import Any

from operators.lineage.record import LineageRecord
from operators.storage.location import parse_uri

# The platform's facets' schemas ship in operators/lineage/facets/. The host is reserved (RFC 2606 .invalid): a URL
# that can never resolve to someone else's document, until the project publishes its schemas under a home of its own.
FACET_SCHEMA_BASE = "https://airflow-training-jobs.invalid/spec/facets/1-0-0/"
CHANNEL_FACET = "trainingChannel"
LINEAGE_FACET = "trainingLineage"
CODE_STAGE, DATA_STAGE, RESTORE_STAGE = "stage_code", "prefetch_data", "restore"
OUTPUT_STAGES = ("upload_artifacts", "publish_model")


def dataset_id(uri: str) -> tuple[str, str]:
    """(namespace, name) of the dataset at `uri`, per the naming rules in the module doc."""
    loc = parse_uri(uri)
    if loc.is_local:
        return "file", (loc.local_path or "/").rstrip("/") or "/"
    return f"{loc.scheme}://{loc.bucket}", loc.key.rstrip("/") or "/"


def facet_schema_url(name: str) -> str:
    return f"{FACET_SCHEMA_BASE}{name}.json#/$defs/{name}"


@functools.cache
def _facet_classes():
    """The platform's facet classes (attrs, as the client's own): built on first use, with the client imported."""
    # lazy: the openlineage client (the optional extra `lineage`), only when a stage reports its lineage
    import attr
    from openlineage.client.facet_v2 import DatasetFacet, InputDatasetFacet

    @attr.define
    class TrainingChannelInputDatasetFacet(InputDatasetFacet):
        """A channel of a training job: its name and the data version the platform's cache computed."""

        channel: str
        dataVersion: str | None = attr.field(default=None)  # noqa: N815 - OpenLineage's field naming
        objects: int | None = attr.field(default=None)
        bytes: int | None = attr.field(default=None)

        @staticmethod
        def _get_schema() -> str:
            return facet_schema_url("TrainingChannelInputDatasetFacet")

    @attr.define
    class TrainingLineageDatasetFacet(DatasetFacet):
        """What made this model, and where its full lineage record is."""

        schemaVersion: int  # noqa: N815
        jobName: str  # noqa: N815
        lineageUri: str | None = attr.field(default=None)  # noqa: N815
        codeUri: str | None = attr.field(default=None)  # noqa: N815
        codeDigest: str | None = attr.field(default=None)  # noqa: N815
        dataVersions: dict[str, str | None] = attr.field(factory=dict)  # noqa: N815
        imageName: str | None = attr.field(default=None)  # noqa: N815
        imageDigest: str | None = attr.field(default=None)  # noqa: N815
        parentModelUri: str | None = attr.field(default=None)  # noqa: N815
        parentLineageUri: str | None = attr.field(default=None)  # noqa: N815
        reproducesJobName: str | None = attr.field(default=None)  # noqa: N815
        dagId: str | None = attr.field(default=None)  # noqa: N815
        runId: str | None = attr.field(default=None)  # noqa: N815

        @staticmethod
        def _get_schema() -> str:
            return facet_schema_url("TrainingLineageDatasetFacet")

    return TrainingChannelInputDatasetFacet, TrainingLineageDatasetFacet


def code_input(record: LineageRecord):
    """The code as an input dataset, its digest as the dataset's version."""
    # lazy: the openlineage client (the optional extra `lineage`), only when a stage reports its lineage
    from openlineage.client.event_v2 import InputDataset
    from openlineage.client.facet_v2 import dataset_version_dataset

    namespace, name = dataset_id(record.code.source_uri)
    facets = {"version": dataset_version_dataset.DatasetVersionDatasetFacet(datasetVersion=record.code.digest)} \
        if record.code.digest else {}
    return InputDataset(namespace=namespace, name=name, facets=facets)


def channel_inputs(record: LineageRecord) -> list:
    """Each channel as an input dataset: its data version, object count and bytes."""
    # lazy: the openlineage client (the optional extra `lineage`), only when a stage reports its lineage
    from openlineage.client.event_v2 import InputDataset
    from openlineage.client.facet_v2 import dataset_version_dataset, input_statistics_input_dataset

    channel_facet, _ = _facet_classes()
    inputs = []
    for channel, part in sorted(record.channels.items()):
        namespace, name = dataset_id(part.uri)
        facets = {"version": dataset_version_dataset.DatasetVersionDatasetFacet(datasetVersion=part.data_version)} \
            if part.data_version else {}
        input_facets: dict[str, Any] = {CHANNEL_FACET: channel_facet(channel=channel, dataVersion=part.data_version,
                                                                     objects=part.objects, bytes=part.bytes)}
        if part.objects is not None or part.bytes is not None:
            input_facets["inputStatistics"] = input_statistics_input_dataset.InputStatisticsInputDatasetFacet(
                size=part.bytes, fileCount=part.objects)
        inputs.append(InputDataset(namespace=namespace, name=name, facets=facets, inputFacets=input_facets))
    return inputs


def parent_input(record: LineageRecord) -> list:
    """The parent model (resume_from, resolved) as an input dataset; none when the run resumed from nothing."""
    # lazy: the openlineage client (the optional extra `lineage`), only when a stage reports its lineage
    from openlineage.client.event_v2 import InputDataset

    if record.parent is None or not record.parent.model_uri:
        return []
    namespace, name = dataset_id(record.parent.model_uri)
    return [InputDataset(namespace=namespace, name=name)]


def model_output(record: LineageRecord) -> list:
    """The published model as the output dataset, with the `lineage` facet (its inputs) and `trainingLineage`;
    none when the run published no model."""
    # lazy: the openlineage client (the optional extra `lineage`), only when a stage reports its lineage
    from openlineage.client.event_v2 import OutputDataset
    from openlineage.client.facet_v2 import lineage

    if not record.outcome.model_uri:
        return []
    _, lineage_facet = _facet_classes()
    sources = [code_input(record), *channel_inputs(record), *parent_input(record)]
    namespace, name = dataset_id(record.outcome.model_uri)
    facets = {
        "lineage": lineage.LineageDatasetFacet(inputs=[
            lineage.LineageDatasetInput(namespace=s.namespace, name=s.name, type="DATASET") for s in sources]),
        LINEAGE_FACET: lineage_facet(
            schemaVersion=record.schema_version, jobName=record.job_name, lineageUri=record.published_uri,
            codeUri=record.code.source_uri, codeDigest=record.code.digest, dataVersions=record.data_versions,
            imageName=record.image.name, imageDigest=record.image.digest,
            parentModelUri=record.parent.model_uri if record.parent else None,
            parentLineageUri=record.parent.lineage_uri if record.parent else None,
            reproducesJobName=record.reproduces.job_name if record.reproduces else None,
            dagId=record.airflow.dag_id, runId=record.airflow.run_id),
    }
    return [OutputDataset(namespace=namespace, name=name, facets=facets)]


def operator_lineage(record: LineageRecord, stage: str | None = None):
    """The provider's OperatorLineage of `stage` (None: the whole run, as the publishing stage reports it):
    stage_code -> the code; prefetch_data -> the channels; restore -> the parent model; upload_artifacts and
    publish_model -> every input and the model; any other stage -> nothing."""
    # lazy: the provider (the optional extra `lineage`), only when a stage reports its lineage
    from airflow.providers.openlineage.extractors import OperatorLineage

    if stage == CODE_STAGE:
        return OperatorLineage(inputs=[code_input(record)])
    if stage == DATA_STAGE:
        return OperatorLineage(inputs=channel_inputs(record))
    if stage == RESTORE_STAGE:
        return OperatorLineage(inputs=parent_input(record))
    if stage is None or stage in OUTPUT_STAGES:
        return OperatorLineage(inputs=[code_input(record), *channel_inputs(record), *parent_input(record)],
                               outputs=model_output(record))
    return OperatorLineage()


__all__ = ["CHANNEL_FACET", "FACET_SCHEMA_BASE", "LINEAGE_FACET", "channel_inputs", "code_input", "dataset_id",
           "facet_schema_url", "model_output", "operator_lineage", "parent_input"]
