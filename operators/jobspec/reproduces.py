"""The spec's `reproduces` section: the run a job reproduces (the reference its lineage names) and what it must run
again exactly, as that run's lineage record says (operators/lineage/record.py): the staged code's digest, each input
channel's data version and the image digest. operators/lineage/reproduce.py builds it from a record; the first task
checks it against the kept record (operators/lineage/reproduce.py check_reproduced_run), the stages enforce the pins
(operators/engine/transfers.py: the code digest after staging, each channel's data version from its listing before a
byte is downloaded); the image digest is the launcher's to enforce.
"""

from __future__ import annotations

from pydantic import Field, field_validator

from operators.jobspec.parts import Strict, spec_error

DIGEST_HINT = "sha256:<64 hex digits>"


class Reproduces(Strict):
    """A reproduction of one earlier run (its lineage record's reference and pins)."""

    job_name: str = Field(min_length=1, max_length=63, description="The job reproduced: its kept lineage record "
                          "names what to run again.")
    dag_id: str | None = Field(None, description="Its DAG (as its lineage record says).")
    run_id: str | None = Field(None, description="Its DAG run (as its lineage record says).")
    lineage_uri: str | None = Field(None, description="Where its lineage record is published.")
    code_digest: str | None = Field(None, description="The staged code must have this digest "
                                    "(operators/lineage/code_digest.py).")
    data_versions: dict[str, str] = Field(default_factory=dict, description="channel -> data version: each channel's "
                                          "listing must still give it (its data cache key).")
    image_digest: str | None = Field(None, description="The image the backend runs must have this digest.")
    allow_changed_data: bool = Field(False, description="Train on a channel's new data when it changed since (each "
                                     "changed channel is logged); otherwise such a run is refused.")

    @field_validator("code_digest")
    @classmethod
    def _digest(cls, value: str | None) -> str | None:
        if value is not None and not (value.startswith("sha256:") and len(value) == 71
                                      and all(c in "0123456789abcdef" for c in value[7:])):
            raise spec_error(f"{value!r} is not a code digest; give {DIGEST_HINT} (as the run's lineage records it)")
        return value


__all__ = ["Reproduces"]
