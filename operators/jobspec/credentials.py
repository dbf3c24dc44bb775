"""The credential policy for a job's literal environment: a literal ``env`` entry whose name or value looks like a
credential (``looks_like_secret``) is refused (:class:`SecretInEnvError`), by the spec and again by each container
backend where it writes the environment. It would be readable by anyone who can inspect the container or its Job, and
would end up in logs and XCom. Matching is deliberately broad: a false positive costs the user one line of config (a
reference), a false negative leaks a credential.
"""

from __future__ import annotations

import re

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
