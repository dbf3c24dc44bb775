"""What every container backend (kubernetes, docker) shares about the inside of a training container: the layout
root the job root is mounted at, paths translated to it, the variables the launcher sets per host, channel names,
and the credential policy for a job's literal environment. Pure functions, no I/O, no client.

Credentials: a literal ``env`` entry whose name or value looks like a credential (``looks_like_secret``) is refused
(:class:`SecretInEnvError`): it would be readable by anyone who can inspect the container or its Job, and would end
up in logs and XCom. Matching is deliberately broad: a false positive costs the user one line of config (a
reference), a false negative leaks a credential.
"""

from __future__ import annotations

import posixpath
import re

from training_runtime.layouts import CONTAINER_ROOTS

LAYOUT_ROOTS = dict(CONTAINER_ROOTS)
CHANNEL_NAME = re.compile(r"^[A-Za-z0-9_-]+$")
# Set by the launcher (or Kubernetes) for each host; overriding them would give every host the same identity.
RESERVED_ENV = frozenset({"JOB_COMPLETION_INDEX", "TRAINING_CURRENT_HOST", "TRAINING_ROOT"})

_SECRET_NAME = re.compile(
    r"(SECRET|PASSWORD|PASSWD|PASSPHRASE|TOKEN|CREDENTIAL|PRIVATE_?KEY|ACCESS_?KEY|API_?KEY|AUTH)",
    re.IGNORECASE,
)
_SECRET_VALUE = re.compile(
    r"(-----BEGIN [A-Z ]*PRIVATE KEY-----|\b(AKIA|ASIA)[0-9A-Z]{16}\b|\bgh[pousr]_[A-Za-z0-9]{30,}\b"
    r"|\bxox[baprs]-[A-Za-z0-9-]{10,}\b|\bhf_[A-Za-z0-9]{30,}\b|\bsk-[A-Za-z0-9_-]{20,}\b"
    r"|[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]+:[^/\s@]+@)"  # a URL with a password: postgres://user:pw@host/db
)


class SecretInEnvError(ValueError):
    """A literal credential in the job's environment."""


def looks_like_secret(name: str, value: str) -> bool:
    return bool(_SECRET_NAME.search(name) or _SECRET_VALUE.search(value or ""))


def layout_root(layout: str) -> str:
    try:
        return LAYOUT_ROOTS[layout]
    except KeyError:
        known = ", ".join(LAYOUT_ROOTS)
        raise ValueError(f"layout {layout!r} is not one of {known}; set the spec's 'layout'") from None


def container_path(value: str, job_root: str, root: str) -> str:
    """A path the Airflow side wrote under the job root, as the container sees it (under the layout root)."""
    job_root = posixpath.normpath(job_root)
    if value == job_root:
        return root
    if value.startswith(job_root + "/"):
        return root + value[len(job_root):]
    return value
