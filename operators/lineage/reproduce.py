"""Reproduce a run: the trigger conf of a new run that trains on exactly what an earlier run's lineage record says
made its model (the same code digest, the same data version of every channel, the same image digest and
hyperparameters), and the first task's check of such a conf against the kept record.

    reproduction_conf(record, spec)   the conf to trigger (the console's Reproduce, `training-job reproduce`): the
                                      run's validated spec less job_name/owner (as Clone's), with `reproduces` set
                                      from the record; ReproduceError (one line) when the run cannot be reproduced
    check_reproduced_run(...)         validate_spec's check: the kept record exists, is the new run's owner's (or
                                      shared with it), and the spec's pins are the record's; SpecError otherwise

The pins are enforced by the stages (operators/engine/transfers.py): stage_code compares the staged tree's digest,
prefetch_data each channel's data version (the data cache's key of its listing) before a byte is downloaded. The code
of an SDK upload (<sha256>.tar.gz in the workspace's staging area) is kept while a kept record of a run with a model
names it (operators/state/retention.py); code at a plain prefix is staged again, and refused when it changed.

No Airflow import: the console, the SDK's server side and the stages use it.
"""

from __future__ import annotations

import os
from typing import Any, Mapping

from operators.jobspec.errors import SpecError
from operators.jobspec.model import JobSpec
from operators.jobspec.ownership import OWNER_KEY, OwnershipPolicy, owner_label
from operators.lineage.record import LineageError, LineageRecord, RunReference, read_record
from operators.storage.location import parse_uri

FIELD = "reproduces.job_name"
# What a reproduction leaves out of the reproduced run's spec: a new job gets a name of its own (derived from its run)
# and its owner from whoever triggers it (validate_spec refuses a given one), as Clone does.
NOT_COPIED = ("job_name", OWNER_KEY, "reproduces")


class ReproduceError(ValueError):
    """The run cannot be reproduced; the message says why and what to do, in one line."""


def run_reference(record: LineageRecord) -> RunReference:
    return RunReference(job_name=record.job_name, dag_id=record.airflow.dag_id, run_id=record.airflow.run_id,
                        lineage_uri=record.published_uri)


def _sdk_archive_gone(record: LineageRecord) -> bool:
    """The record's code is an SDK upload in this workspace's staging area that is no longer there (expired or
    deleted); a remote archive is not looked for here (stage_code's digest check refuses it when it changed)."""
    if not record.code.archive_sha256:
        return False
    loc = parse_uri(record.code.source_uri)
    return bool(loc.is_local and loc.local_path and not os.path.exists(loc.local_path))


def reproduction_conf(record: LineageRecord, spec: Mapping[str, Any]) -> dict[str, Any]:
    """The conf that reproduces the run of `record`, from its validated spec `spec` (validate_spec's XCom)."""
    if spec.get("job_name") and spec["job_name"] != record.job_name:
        raise ReproduceError(f"the lineage record is job {record.job_name!r}'s, not {spec['job_name']!r}'s")
    if not record.code.digest:
        raise ReproduceError(f"job {record.job_name}'s lineage records no code digest (its code was not staged, or "
                             "could not be read), so no run can be checked to stage the same code; use Clone instead")
    if _sdk_archive_gone(record):
        raise ReproduceError(f"job {record.job_name}'s code, the SDK upload {record.code.source_uri}, is gone (it "
                             "expired: no kept lineage of a run with a model names it, or it was deleted); submit "
                             "the code again and use Clone")
    unknown = sorted(name for name, version in record.data_versions.items() if not version)
    if unknown:
        raise ReproduceError(f"channel {unknown[0]}: job {record.job_name}'s lineage records no data version (the "
                             "channel was not prefetched), so the same data cannot be checked; use Clone instead")
    conf = {key: value for key, value in spec.items() if key not in NOT_COPIED}
    conf["hyperparameters"] = dict(record.hyperparameters)
    if record.image.name and record.image.backend != "local":
        conf["image_uri"] = record.image.name
    conf["inputs"] = {name: channel.uri for name, channel in record.channels.items()}
    conf["source_dir"] = record.code.source_uri
    if record.parent is not None:
        # the model it resumed from, not what "latest" finds now (None: it started fresh, so does its reproduction)
        conf["resume_from"] = record.parent.model_uri
    conf["reproduces"] = {
        **run_reference(record).model_dump(),
        "code_digest": record.code.digest,
        "data_versions": {name: str(version) for name, version in record.data_versions.items()},
        "image_digest": record.image.digest,
        "allow_changed_data": False,
    }
    return conf


def _record_owner_may_be_read(policy: OwnershipPolicy | None, owner: str, record_owner: str) -> bool:
    if owner == record_owner:
        return True
    return policy is not None and policy.may_read(owner, record_owner)


def check_owner(record: LineageRecord, owner: str, policy: OwnershipPolicy | None = None) -> None:
    """SpecError unless the run of `record` is `owner`'s, or its outputs are shared with `owner` (a tenant reaches only
    its own runs: operators/jobspec/ownership.py); a DAG's run is its DAG's (a retraining DAG reproduces its own)."""
    record_owner = record.airflow.owner
    if not record_owner or not _record_owner_may_be_read(policy, owner, record_owner):
        # the same words whether the run is another owner's or names none: nothing more about it is disclosed
        raise SpecError(FIELD, f"job {record.job_name!r} is not a run of {owner_label(owner)}; a reproduction "
                               "reproduces only your own runs (or ones an admin shares with you)")


def check_reproduced_run(spec: JobSpec, workspace: str, owner: str,
                         policy: OwnershipPolicy | None = None) -> LineageRecord | None:
    """validate_spec's check of `spec.reproduces` (None: a plain job): the reproduced job's KEPT record (the job's
    state directory, which tenant code cannot write) exists, its run's owner is `owner` (or its outputs are shared
    with `owner` under the admin's `policy`: operators/jobspec/ownership.py), and the spec's reference and pins are
    what that record says. SpecError naming the field otherwise."""
    wanted = spec.reproduces
    if wanted is None:
        return None
    try:
        record = read_record(workspace, wanted.job_name)
    except (LineageError, OSError, ValueError) as err:
        raise SpecError(FIELD, f"job {wanted.job_name!r}'s lineage record cannot be read ({err}); reproduce another "
                               "run") from None
    if record is None:
        raise SpecError(FIELD, f"no run of job {wanted.job_name!r} with a lineage record is kept here (unknown, "
                               "removed by retention, or ended before its upload); reproduce a run the training-jobs "
                               "view lists")
    check_owner(record, owner, policy)
    for name, given, kept in (("dag_id", wanted.dag_id, record.airflow.dag_id),
                              ("run_id", wanted.run_id, record.airflow.run_id),
                              ("code_digest", wanted.code_digest, record.code.digest),
                              ("image_digest", wanted.image_digest, record.image.digest)):
        if given is not None and given != kept:
            raise SpecError(f"reproduces.{name}", f"is {given!r} but job {wanted.job_name}'s lineage records "
                                                  f"{kept!r}; let Reproduce fill the section")
    if not wanted.code_digest:
        raise SpecError("reproduces.code_digest", f"is required: job {wanted.job_name}'s lineage records "
                                                  f"{record.code.digest or 'none'}; let Reproduce fill the section")
    for channel, version in sorted(wanted.data_versions.items()):
        kept_version = record.data_versions.get(channel)
        if version != kept_version:
            raise SpecError(f"reproduces.data_versions.{channel}",
                            f"is {version!r} but job {wanted.job_name}'s lineage records "
                            f"{kept_version!r}; let Reproduce fill the section")
    return record


__all__ = ["FIELD", "ReproduceError", "check_owner", "check_reproduced_run", "reproduction_conf", "run_reference"]
