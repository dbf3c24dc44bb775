"""The platform's owner records beside the outputs, and the checks that read them (the rules: operators/jobspec/
ownership.py).

    <output_path>/<job_name>/.training-owner.json        the run's job area (written before its model is uploaded)
    <checkpoint_path>/.training-owner.json               a checkpoint_path, claimed by the first owner that names it
    <output_path>/<base_job_name>/.training-owner.json   a retraining DAG's lineage (its latest.json pointer)
    <output_path>/.training-owners/<owner>.json          whose job areas lie in an output_path

Only the platform writes them, with its own storage identity: tenant code never holds the platform's credentials, the
upload stage writes fixed names (model.tar.gz, output.tar.gz, failure, metrics.json) and the checkpoint sync, the one
stage that uploads names a tenant chose, never uploads a file or directory of either reserved name
(operators/staging/checkpoints.py). A record is `{"owner", "dag_id", "lineage", "kind", "job_name", "run_id"}`.

Locations are checked top-down: a location inside another owner's job area, checkpoint_path or lineage is refused for
writing, and for reading unless shared; one inside an output_path that holds other owners' job areas is refused for
reading unless it is inside a job area the reader may read. A checkpoint_path that holds another owner's records is
refused too (it would sync over them). Each refusal is a SpecError naming the field.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Mapping

from operators.job_outputs import MODEL_IN_JOB_AREA
from operators.jobspec.errors import SpecError
from operators.jobspec.ownership import (
    AREA_OWNERS_DIR,
    OWNER_RECORD,
    SHARES_SETTING,
    OwnershipPolicy,
    owner_label,
    owner_segment,
    read_locations,
)
from operators.storage.errors import StorageError
from operators.storage.location import parse_uri

KINDS = {"job": "run", "checkpoints": "checkpoint_path", "lineage": "retraining lineage"}
# the model of a run, relative to its job area (`<output_path>/<job_name>/`)


@dataclass(frozen=True)
class OwnerRecord:
    owner: str
    dag_id: str
    lineage: str  # the base_job_name
    kind: str  # job | checkpoints | lineage
    job_name: str = ""
    run_id: str = ""

    def to_bytes(self) -> bytes:
        return json.dumps({**asdict(self), "recorded_at": time.time()}, indent=1).encode()

    @classmethod
    def parse(cls, data: bytes) -> OwnerRecord | None:
        """None when the bytes are not a record (the caller refuses what it cannot read)."""
        try:
            raw = json.loads(data)
        except ValueError:
            return None
        if not isinstance(raw, Mapping) or not all(isinstance(raw.get(k), str) for k in ("owner", "dag_id", "kind")):
            return None
        return cls(raw["owner"], raw["dag_id"], str(raw.get("lineage") or ""), raw["kind"],
                   str(raw.get("job_name") or ""), str(raw.get("run_id") or ""))

    def describe(self) -> str:
        what = KINDS.get(self.kind, self.kind)
        lineage = f", lineage {self.lineage!r}" if self.lineage else ""
        return f"{owner_label(self.owner)}'s {what}" + (f" {self.job_name}" if self.job_name else "") + \
            f" (DAG {self.dag_id!r}{lineage})"


UNREADABLE = OwnerRecord("?", "?", "", "unreadable")


def prefix_uri(uri: str) -> str:
    return uri.rstrip("/") + "/"


def record_uri(prefix: str) -> str:
    return prefix_uri(prefix) + OWNER_RECORD


def ancestors(uri: str) -> list[str]:
    """The prefixes a location lies in, top-down, ending with the location itself (as a prefix): for
    s3://b/x/y: s3://b/, s3://b/x/, s3://b/x/y/; for /data/x: /, /data/, /data/x/."""
    loc = parse_uri(uri)
    if loc.is_local:
        parts = [p for p in (loc.local_path or "/").split("/") if p]
        return ["/" + "".join(p + "/" for p in parts[:i]) for i in range(len(parts) + 1)]
    parts = [p for p in loc.key.split("/") if p]
    top = f"{loc.scheme}://{loc.bucket}/"
    return [top + "".join(p + "/" for p in parts[:i]) for i in range(len(parts) + 1)]


def read_record(storage, prefix: str) -> OwnerRecord | None:
    """The record of `prefix`, None when it has none, UNREADABLE when something is there that is not one."""
    uri = record_uri(prefix)
    try:
        if not storage.exists(uri):
            return None
    except StorageError as err:
        if err.permanent:  # access denied above the job's own prefixes: this identity never wrote a record there
            return None
        raise
    if storage.is_prefix(uri):  # a directory of that name (a record is a file)
        return UNREADABLE
    return OwnerRecord.parse(storage.read_bytes(uri)) or UNREADABLE


def area_owners(storage, prefix: str) -> set[str]:
    """The owners whose job areas the platform recorded in output area `prefix`."""
    owners = set()
    try:
        listed = storage.list_objects(prefix_uri(prefix) + AREA_OWNERS_DIR + "/")
    except StorageError as err:
        if err.permanent:  # as in read_record
            return owners
        raise
    for obj in listed:
        try:
            owner = json.loads(storage.read_bytes(prefix_uri(prefix) + AREA_OWNERS_DIR + "/" + obj.relative_path))
        except ValueError:
            owner = None
        owners.add(owner.get("owner") if isinstance(owner, Mapping) and isinstance(owner.get("owner"), str) else "?")
    return owners


def _refusal(field: str, uri: str, record: OwnerRecord, rule: str) -> SpecError:
    if record is UNREADABLE:
        return SpecError(field, f"{uri} lies in a location whose owner record cannot be read; a platform record there "
                                "was damaged: ask an admin, or use another location")
    return SpecError(field, f"{uri} lies in {record.describe()}; {rule}")


def check_read(storage, policy: OwnershipPolicy, field: str, uri: str, reader: str) -> None:
    """SpecError unless `reader` may read `uri`: not in another owner's recorded location nor in an output area of
    other owners, unless inside a run it may read or shared with it."""
    others_area: tuple[str, set[str]] | None = None
    for prefix in ancestors(uri):
        record = read_record(storage, prefix)
        if record is not None:
            if record is not UNREADABLE and policy.may_read(reader, record.owner):
                return  # inside a location of its own (or shared with it): whatever lies above does not matter
            raise _refusal(field, uri, record, f"{owner_label(reader)} may not read another owner's outputs unless an "
                                               f"admin shares them ({SHARES_SETTING})")
        others = {owner for owner in area_owners(storage, prefix) if not policy.may_read(reader, owner)}
        if others:
            others_area = (prefix, others)
    if others_area is not None:
        prefix, others = others_area
        raise SpecError(field, f"{uri} lies in the output area {prefix}, which holds runs of "
                               f"{', '.join(owner_label(o) for o in sorted(others))}; {owner_label(reader)} may read "
                               f"only its own runs there (<output_path>/<job_name>/) unless an admin shares them "
                               f"({SHARES_SETTING})")


def check_write(storage, field: str, uri: str, writer: str, *, holds: bool = False) -> OwnerRecord | None:
    """SpecError when `uri` lies in (or is) another owner's recorded location, or, with `holds`, holds one (a
    checkpoint_path syncs whatever names its job writes below it). Returns the record of `uri` itself, if any."""
    record = None
    for prefix in ancestors(uri):
        record = read_record(storage, prefix)
        if record is not None and (record is UNREADABLE or record.owner != writer):
            raise _refusal(field, uri, record, f"a location belongs to one owner: {owner_label(writer)} may not write "
                                               "there; use a path of your own")
    if holds:
        for name, found in _records_below(storage, uri):
            if found is UNREADABLE or found.owner != writer:
                raise _refusal(field, f"{uri} (at {name})", found, f"a {field} that holds another owner's outputs "
                                                                   "would sync over them; use a path of your own")
    return record


def _records_below(storage, uri: str) -> Iterable[tuple[str, OwnerRecord]]:
    base = prefix_uri(uri)
    for obj in storage.list_objects(base):
        parts = obj.relative_path.split("/")
        if parts[-1] == OWNER_RECORD and len(parts) > 1:
            yield obj.relative_path, OwnerRecord.parse(storage.read_bytes(base + obj.relative_path)) or UNREADABLE
        elif AREA_OWNERS_DIR in parts[:-1]:
            try:
                owner = json.loads(storage.read_bytes(base + obj.relative_path)).get("owner")
            except (ValueError, AttributeError):
                owner = None
            yield obj.relative_path, OwnerRecord(owner, "?", "", "job") if isinstance(owner, str) else UNREADABLE


def claim(storage, field: str, uri: str, record: OwnerRecord, log=None) -> None:
    """Claim `uri` (a checkpoint_path or a retraining lineage) for `record.owner`: refused when it lies in, is or
    holds another owner's location; recorded when nobody has claimed it yet."""
    own = check_write(storage, field, uri, record.owner, holds=True)
    if own is None:
        storage.write_bytes(record_uri(uri), record.to_bytes())
        mine = read_record(storage, uri)  # two first claims at once: the record that stayed decides
        if mine is None or mine is UNREADABLE or mine.owner != record.owner:
            raise _refusal(field, uri, mine or UNREADABLE, "it was claimed at the same moment by another owner")
        if log is not None:
            log.info("%s %s is claimed for %s", field, uri, owner_label(record.owner))
    elif own.lineage != record.lineage and log is not None:
        log.warning("%s %s was claimed for lineage %r of the same owner; this run's lineage is %r", field, uri,
                    own.lineage, record.lineage)


def record_job_area(storage, output_path: str, job_name: str, record: OwnerRecord) -> None:
    """Before a run's first artifact goes up: its job area's record and its owner in the output area's list.
    SpecError (a refusal) when the job area, or a location above it, belongs to another owner."""
    area = prefix_uri(output_path) + job_name + "/"
    own = check_write(storage, "output_path", area, record.owner)
    if own is None:
        storage.write_bytes(record_uri(area), record.to_bytes())
    marker = prefix_uri(output_path) + AREA_OWNERS_DIR + f"/{owner_segment(record.owner)}.json"
    if not storage.exists(marker):
        storage.write_bytes(marker, json.dumps({"owner": record.owner}).encode())


def check_spec_locations(storage, policy: OwnershipPolicy, spec: Mapping[str, Any], owner: str,
                         record: OwnerRecord, log=None) -> None:
    """Every location of a validated spec (JobSpec.to_dict()) against the records: its job area and output_path
    writable by `owner`, its checkpoint_path claimed for it, what it reads readable by it."""
    output_path = spec["output_path"]
    check_write(storage, "output_path", output_path, owner)
    check_write(storage, "job_name", prefix_uri(output_path) + spec["job_name"] + "/", owner)
    if spec.get("checkpoint_path"):
        claim(storage, "checkpoint_path", spec["checkpoint_path"],
              OwnerRecord(owner, record.dag_id, record.lineage, "checkpoints", run_id=record.run_id), log)
    for name, uri in read_locations(spec):
        check_read(storage, policy, name, uri, owner)


def latest_model(storage, output_path: str, base_job_name: str, exclude_job: str, owner: str,
                 log=None) -> str | None:
    """The newest `<output_path>/<base_job_name>-*/output/model.tar.gz` whose job area the platform recorded for
    `owner` and lineage `base_job_name`, other than the running job's own (found by listing object storage: task code
    has no metadata-DB access). Models of other owners or lineages, and models with no record, are never taken."""
    prefix = prefix_uri(output_path)
    candidates, records = [], set()
    for obj in storage.list_objects(prefix):
        parts = obj.relative_path.split("/")
        if len(parts) == 2 and parts[1] == OWNER_RECORD:
            records.add(parts[0])
        if len(parts) != 3 or "/".join(parts[1:]) != MODEL_IN_JOB_AREA:
            continue
        job = parts[0]
        if job != exclude_job and job.startswith(base_job_name + "-"):
            candidates.append((obj.last_modified, job))
    skipped = 0
    for _, job in sorted(candidates, reverse=True):
        record = read_record(storage, prefix + job) if job in records else None
        if record is not None and record is not UNREADABLE and record.owner == owner and record.kind == "job" \
                and record.lineage == base_job_name:
            if skipped and log is not None:
                log.info("resume_from=latest: %d newer model(s) of other owners, lineages or with no owner record "
                         "were passed over", skipped)
            return f"{prefix}{job}/{MODEL_IN_JOB_AREA}"
        skipped += 1
    if skipped and log is not None:
        log.info("resume_from=latest: %d model(s) under %s are not %s's runs of lineage %r: none taken", skipped,
                 prefix, owner, base_job_name)
    return None
