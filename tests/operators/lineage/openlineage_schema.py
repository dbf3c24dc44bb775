"""Validating OpenLineage events: OpenLineage's RunEvent schema and the platform's facet schemas
(operators/lineage/facets/), shared by the unit tests (tests/operators/lineage/test_openlineage.py) and the real run's
(tests/integration/test_openlineage_run.py).

The RunEvent schema below states the spec's rules (spec 2-0-2: OpenLineage.json's RunEvent, Run, Job, datasets and
BaseFacet) in our own words; the client ships no copy of the spec's files. With OPENLINEAGE_SPEC naming a directory
that holds the spec's files (the spec/ folder of OpenLineage's repository: OpenLineage.json, facets/*.json), each event
is validated against OpenLineage.json too, and each standard facet against the schema its _schemaURL names.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import jsonschema

from operators.lineage.openlineage import CHANNEL_FACET, LINEAGE_FACET, facet_schema_url

FACETS_DIR = Path(__file__).resolve().parents[3] / "operators" / "lineage" / "facets"
_FACET = {"type": "object", "required": ["_producer", "_schemaURL"],
          "properties": {"_producer": {"type": "string", "format": "uri"},
                         "_schemaURL": {"type": "string", "format": "uri"}}}
_FACETS = {"type": "object", "additionalProperties": _FACET}
_DATASET = {"type": "object", "required": ["namespace", "name"],
            "properties": {"namespace": {"type": "string", "minLength": 1}, "name": {"type": "string", "minLength": 1},
                           "facets": _FACETS, "inputFacets": _FACETS, "outputFacets": _FACETS}}
RUN_EVENT_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["eventTime", "producer", "schemaURL", "run", "job"],
    "properties": {
        "eventType": {"enum": ["START", "RUNNING", "COMPLETE", "ABORT", "FAIL", "OTHER"]},
        "eventTime": {"type": "string", "format": "date-time"},
        "producer": {"type": "string", "format": "uri"},
        "schemaURL": {"type": "string", "format": "uri"},
        "run": {"type": "object", "required": ["runId"],
                "properties": {"runId": {"type": "string", "format": "uuid"}, "facets": _FACETS}},
        "job": {"type": "object", "required": ["namespace", "name"],
                "properties": {"namespace": {"type": "string"}, "name": {"type": "string"}, "facets": _FACETS}},
        "inputs": {"type": "array", "items": _DATASET},
        "outputs": {"type": "array", "items": _DATASET},
    },
}
FORMATS = jsonschema.Draft202012Validator.FORMAT_CHECKER


def validate_event(event: dict) -> None:
    """The event against the RunEvent schema (and the spec's files, with OPENLINEAGE_SPEC set) and each platform facet
    it carries against its schema in operators/lineage/facets/; raises jsonschema.ValidationError."""
    jsonschema.Draft202012Validator(RUN_EVENT_SCHEMA, format_checker=FORMATS).validate(event)
    if os.environ.get("OPENLINEAGE_SPEC"):
        validate_against_the_spec(event, Path(os.environ["OPENLINEAGE_SPEC"]))
    for dataset in event.get("inputs", []):
        facet = (dataset.get("inputFacets") or {}).get(CHANNEL_FACET)
        if facet is not None:
            validate_facet(facet, "TrainingChannelInputDatasetFacet")
    for dataset in event.get("outputs", []):
        facet = (dataset.get("facets") or {}).get(LINEAGE_FACET)
        if facet is not None:
            validate_facet(facet, "TrainingLineageDatasetFacet")


def validate_against_the_spec(event: dict, spec: Path) -> None:
    """The event against the spec's OpenLineage.json, and each facet whose _schemaURL the spec directory holds."""
    from referencing import Registry, Resource

    documents = [json.loads(p.read_text()) for p in [spec / "OpenLineage.json", *sorted(spec.glob("facets/*.json"))]]
    registry = Registry().with_resources((d["$id"], Resource.from_contents(d)) for d in documents if "$id" in d)
    base = documents[0]
    jsonschema.Draft202012Validator(base, registry=registry, format_checker=FORMATS).validate(event)
    checked = 0
    for facet in event_facets(event):
        if facet["_schemaURL"].split("#")[0] in registry:
            jsonschema.Draft202012Validator({"$ref": facet["_schemaURL"]}, registry=registry,
                                            format_checker=FORMATS).validate(facet)
            checked += 1
    assert checked, "no facet of the event has a schema in the spec directory"


def event_facets(event: dict):
    """Every facet of the event: the run's, the job's and each dataset's (facets, inputFacets, outputFacets)."""
    for part in (event["run"], event["job"], *event.get("inputs", []), *event.get("outputs", [])):
        for key in ("facets", "inputFacets", "outputFacets"):
            yield from (part.get(key) or {}).values()


def validate_facet(facet: dict, name: str) -> None:
    """A platform facet against its schema (operators/lineage/facets/<name>.json), and its _schemaURL naming it."""
    schema = json.loads((FACETS_DIR / f"{name}.json").read_text())
    assert facet["_schemaURL"] == facet_schema_url(name) == f"{schema['$id']}#/$defs/{name}"
    jsonschema.Draft202012Validator({**schema, "$ref": f"#/$defs/{name}"}, format_checker=FORMATS).validate(facet)


__all__ = ["FACETS_DIR", "RUN_EVENT_SCHEMA", "event_facets", "validate_against_the_spec", "validate_event",
           "validate_facet"]
