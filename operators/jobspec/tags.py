"""The job spec's `tags`: short labels a team filters the list by and finds its runs by in MLflow.

Given as a list of names (["baseline", "q3"]) or a mapping of name -> value ({"team": "churn", "ticket": "ML-12"});
kept as a mapping (a listed name has the value ""). Both are what the triggering user typed: the console shows them
escaped, MLflow receives them as run tags under their own names, and the names the platform's own tags use
(`training.*`, `mlflow.*`) are refused so a tag can never pass for the platform's record of a run.
"""

from __future__ import annotations

import re
from typing import Any

from operators.jobspec.parts import json_text, spec_error

MAX_TAGS = 20
MAX_NAME = 63
MAX_VALUE = 256
TAG_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-/]*$")
RESERVED_PREFIXES = ("training.", "mlflow.")
SHAPE = 'a list of names (["baseline"]) or an object of name -> short string ({"team": "churn"})'


def normalise_tags(value: Any) -> dict[str, str]:
    """The tags as {name: value}; a spec error naming the tag for anything else."""
    if value is None:
        return {}
    if isinstance(value, list):
        if not all(isinstance(v, str) for v in value):
            raise spec_error(f"must be {SHAPE}; got {json_text(value)[:80]}")
        value = {name: "" for name in value}
    if not isinstance(value, dict):
        raise spec_error(f"must be {SHAPE}; got {json_text(value)[:80]}")
    if len(value) > MAX_TAGS:
        raise spec_error(f"has {len(value)} tags; at most {MAX_TAGS}")
    tags: dict[str, str] = {}
    for name, tag in value.items():
        where = f"tags.{name}" if name else "tags"
        if not isinstance(name, str) or not TAG_NAME.match(name) or len(name) > MAX_NAME:
            raise spec_error(f"names start with a letter or digit and use only letters, digits, '_', '.', '-', '/' "
                             f"(at most {MAX_NAME} characters)", where)
        if name.lower().startswith(RESERVED_PREFIXES):
            raise spec_error(f"names starting with {' or '.join(RESERVED_PREFIXES)} are the platform's own; rename "
                             "the tag", where)
        if isinstance(tag, bool) or not isinstance(tag, (str, int, float)):
            raise spec_error(f"values must be short strings, got {json_text(tag)[:80]}", where)
        text = str(tag)
        if len(text) > MAX_VALUE or any(ord(c) < 32 or ord(c) == 127 for c in text):
            raise spec_error(f"values are one line of at most {MAX_VALUE} characters", where)
        tags[name] = text
    return tags
