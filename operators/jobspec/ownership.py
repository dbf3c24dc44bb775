"""Who owns a run, and what an owner may read and write: the pure rules (no I/O; the platform's records that say whose a
location is are read and written by operators/state/owner_records.py).

- A run's owner is the user who triggered it; a run nobody triggered (a schedule, `airflow dags test`, a CLI trigger
  without a user, an asset event) is its DAG's, `dag:<dag_id>`. A retraining DAG's runs are all its DAG's: its config
  (a DAG author's file) fixes the lineage, whoever starts a run of it.
- An owner writes (output_path, checkpoint_path) only where no other owner's run, checkpoints or lineage are, and reads
  (inputs, resume_from, source_dir) another owner's outputs only when an admin shares them with it
  ([training] output_shares).
- With [training] output_roots set (templates such as `s3://models/{user}/` or `/srv/models/{team}/`) every owner
  writes under its own roots only, and a read under another owner's root is refused unless shared: a check on the URIs
  alone, before anything is read.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from operators.jobspec.errors import SpecError
from operators.settings import ownership_settings, user_dir_name
from operators.storage.location import parse_uri

OWNER_KEY = "owner"  # the validated spec's (validate_spec's XCom) key for the run's owner; never the user's to set
DAG_OWNER_PREFIX = "dag:"
TEAM_PREFIX = "team:"
# The platform's records beside the outputs (one home for their names; tenants' checkpoint sync never writes either).
OWNER_RECORD = ".training-owner.json"  # <X>/ is a run's job area, a claimed checkpoint_path or a retraining lineage
AREA_OWNERS_DIR = ".training-owners"  # <output_path>/.training-owners/<owner>.json: whose job areas lie here
RESERVED_NAMES = (OWNER_RECORD, AREA_OWNERS_DIR)
ROOTS_SETTING = "[training] output_roots"
SHARES_SETTING = "[training] output_shares"
PLACEHOLDERS = ("{user}", "{team}")
# the spec fields an owner writes to, and those it reads from
WRITE_FIELDS = ("output_path", "checkpoint_path")


# What Airflow records as the triggering user of a `dags test` / dag.test() run (no person triggered it).
DAGS_TEST_USER = "dag_test"


def run_owner(triggering_user: str | None, dag_id: str) -> str:
    """The owner of a run: its triggering user, or `dag:<dag_id>` for a run nobody triggered (a schedule, an asset
    event, `airflow dags test`). `airflow dags trigger` records the OS user that ran it, which is then the owner."""
    user = (triggering_user or "").strip()
    return user if user and user != DAGS_TEST_USER else dag_owner(dag_id)


def dag_owner(dag_id: str) -> str:
    return f"{DAG_OWNER_PREFIX}{dag_id}"


def owner_label(owner: str) -> str:
    """How a refusal names an owner: `user 'alice'`, `DAG 'retrain_x'`."""
    if owner.startswith(DAG_OWNER_PREFIX):
        return f"DAG {owner[len(DAG_OWNER_PREFIX):]!r}"
    return f"user {owner!r}"


def owner_segment(owner: str) -> str:
    """The path segment `{user}` becomes for an owner: the user name when it is plain, `_dag_<dag_id>` for a DAG (no
    user name starts with `_`), else a digest (operators/settings.py user_dir_name)."""
    if owner.startswith(DAG_OWNER_PREFIX):
        return "_dag_" + user_dir_name(owner[len(DAG_OWNER_PREFIX):])
    return user_dir_name(owner)


def normal_uri(uri: str) -> str:
    """A URI compared by prefix: a local path absolute and resolved (`file://` dropped), a remote one as written, each
    ending in `/` (so `s3://b/alice` never matches `s3://b/alice2/`)."""
    loc = parse_uri(uri)
    text = os.path.realpath(loc.local_path) if loc.is_local and loc.local_path else f"{loc.scheme}://{loc.bucket}/{loc.key}"
    return text.rstrip("/") + "/"


def is_within(uri: str, prefix: str) -> bool:
    return normal_uri(uri).startswith(normal_uri(prefix))


@dataclass(frozen=True)
class RootTemplate:
    """One of [training] output_roots: the text before its placeholder, the placeholder, and the text after it."""

    head: str
    placeholder: str
    tail: str

    @classmethod
    def parse(cls, text: str) -> RootTemplate:
        found = [p for p in PLACEHOLDERS if p in text]
        if len(found) != 1 or text.count(found[0]) != 1:
            raise ValueError(f"airflow.cfg {ROOTS_SETTING}: {text!r} must hold exactly one of {', '.join(PLACEHOLDERS)}"
                             " (e.g. s3://models/{user}/); fix the setting")
        head, tail = text.split(found[0])
        if not head.endswith("/") or (tail and not tail.startswith("/")):
            raise ValueError(f"airflow.cfg {ROOTS_SETTING}: in {text!r} the placeholder must be a whole path segment; "
                             "fix the setting")
        return cls(normal_uri(head), found[0], tail.strip("/"))

    def instance(self, segment: str) -> str:
        return f"{self.head}{segment}/" + (f"{self.tail}/" if self.tail else "")

    def segment_of(self, uri: str) -> str | None:
        """The segment a URI lies under (`alice` for s3://models/alice/x with s3://models/{user}/), or None."""
        text = normal_uri(uri)
        if not text.startswith(self.head):
            return None
        segment, _, rest = text[len(self.head):].partition("/")
        if not segment or (self.tail and not (rest + "/").startswith(self.tail + "/")):
            return None
        return segment

    def held_by(self, uri: str) -> bool:
        """Whether `uri` holds every instance of this root (it names the template's head or above)."""
        return self.head.startswith(normal_uri(uri))


@dataclass(frozen=True)
class OwnershipPolicy:
    """The admin's settings: output roots (templates), teams (team -> users), shares (owner -> who may read)."""

    roots: tuple[RootTemplate, ...] = ()
    teams: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    shares: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def teams_of(self, owner: str) -> tuple[str, ...]:
        return tuple(sorted(team for team, users in self.teams.items() if owner in users))

    def principals(self, owner: str) -> set[str]:
        """The names a share entry may give for `owner`: itself and `team:<t>` for each of its teams."""
        return {owner, *(TEAM_PREFIX + team for team in self.teams_of(owner))}

    def may_read(self, reader: str, owner: str) -> bool:
        """Whether `reader` may read what `owner`'s runs wrote: its own, its team's, or what an admin shared."""
        if reader == owner or (owner.startswith(TEAM_PREFIX) and owner[len(TEAM_PREFIX):] in self.teams_of(reader)):
            return True
        granted = set(self.shares.get(owner, ()))
        if not owner.startswith(TEAM_PREFIX):
            for team in self.teams_of(owner):  # what a team shares covers its members' outputs
                granted |= set(self.shares.get(TEAM_PREFIX + team, ()))
        return "*" in granted or bool(granted & self.principals(reader))

    # -- the roots -------------------------------------------------------------------------------------------------
    def own_roots(self, owner: str) -> list[str]:
        found = []
        for root in self.roots:
            if root.placeholder == "{user}":
                found.append(root.instance(owner_segment(owner)))
            else:
                found.extend(root.instance(user_dir_name(team)) for team in self.teams_of(owner))
        return found

    def root_owner(self, uri: str) -> str | None:
        """The owner (a user, `dag:<id>` or `team:<t>`) whose root `uri` lies under; None: under no root."""
        for root in self.roots:
            segment = root.segment_of(uri)
            if segment is None:
                continue
            if root.placeholder == "{team}":
                team = next((t for t in self.teams if user_dir_name(t) == segment), segment)
                return TEAM_PREFIX + team
            if segment.startswith("_dag_"):
                return dag_owner(segment[len("_dag_"):])
            return segment  # a plain user name is its own segment (a digest stays a digest: nobody's but its own)
        return None

    def check_roots(self, owner: str, locations: Iterable[tuple[str, str]]) -> None:
        """SpecError (field first) for a write outside the owner's roots, or a read of another owner's root that
        is not shared with it. `locations`: (field, URI) of the spec. No roots set: nothing to check."""
        if not self.roots:
            return
        own = self.own_roots(owner)
        for name, uri in locations:
            if name in WRITE_FIELDS:
                if not any(is_within(uri, root) for root in own):
                    where = ", ".join(own) or "none: the admin gave you no root"
                    raise SpecError(name, f"{uri} is outside the output roots of {owner_label(owner)} ({where}); "
                                          f"write under one of them ({ROOTS_SETTING})")
                continue
            held = next((root for root in self.roots if root.held_by(uri)), None)
            if held is not None:
                raise SpecError(name, f"{uri} holds the outputs of every owner under {held.head}; name your own "
                                      f"outputs (under {', '.join(own) or 'your root'}) or one shared with you")
            other = self.root_owner(uri)
            if other is not None and not self.may_read(owner, other):
                raise SpecError(name, f"{uri} is under the output root of {owner_label(other)}, which is not shared "
                                      f"with {owner_label(owner)}; read your own outputs, or ask an admin to share "
                                      f"them ({SHARES_SETTING})")


def check_reserved_names(locations: Iterable[tuple[str, str]]) -> None:
    """SpecError for a location with a path segment named like the platform's owner records (a job writing there would
    put something of that name beside the outputs)."""
    for name, uri in locations:
        segments = normal_uri(uri).split("/")
        reserved = next((s for s in segments if s in RESERVED_NAMES), None)
        if reserved:
            raise SpecError(name, f"{uri} names {reserved!r}, the platform's owner records; use another path")


def parse_ownership(roots: str, teams: Any, shares: Any) -> OwnershipPolicy:
    """The admin's settings -> OwnershipPolicy; ValueError (one line naming the setting) when one is malformed."""
    templates = tuple(RootTemplate.parse(text.strip()) for text in roots.split(",") if text.strip())
    if not isinstance(teams, Mapping) or not all(
            isinstance(users, list) and all(isinstance(u, str) for u in users) for users in teams.values()):
        raise ValueError('airflow.cfg [training] teams must be a JSON object {"<team>": ["<user>", ...]}; fix the '
                         "setting")
    if not isinstance(shares, Mapping) or not all(
            isinstance(readers, list) and all(isinstance(r, str) for r in readers) for readers in shares.values()):
        raise ValueError(f'airflow.cfg {SHARES_SETTING} must be a JSON object {{"<owner or team:<t>>": '
                         '["<user>", "team:<t>", "dag:<dag_id>" or "*", ...]}; fix the setting')
    return OwnershipPolicy(templates, {str(t): tuple(u) for t, u in teams.items()},
                           {str(o): tuple(r) for o, r in shares.items()})


def load_ownership() -> OwnershipPolicy:
    """The admin's ownership settings from airflow.cfg (or AIRFLOW__TRAINING__OUTPUT_ROOTS, ..._TEAMS, ..._SHARES)."""
    return parse_ownership(*ownership_settings())


def read_locations(spec: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(field, URI) of what a validated spec (JobSpec.to_dict()) reads: its code, its channels and its resume_from."""
    found = [("source_dir", spec["source_dir"])] if spec.get("source_dir") else []
    found += [(f"inputs.{channel}", uri) for channel, uri in (spec.get("inputs") or {}).items()]
    if spec.get("resume_from") and spec["resume_from"] != "latest":
        found.append(("resume_from", spec["resume_from"]))
    return found


def write_locations(spec: Mapping[str, Any]) -> list[tuple[str, str]]:
    return [(name, spec[name]) for name in WRITE_FIELDS if spec.get(name)]
