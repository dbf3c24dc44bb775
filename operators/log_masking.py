"""Secrets out of a log without Airflow: what a data-plane step (operators/step_process.py) logs reaches the task's log,
which whoever triggers the DAG reads, and the step reads the admin's storage connections. Whoever reads a secret
registers it here (operators/storage/env_connections.py does for each connection); `MaskingFilter` on the log's
handlers replaces it with *** in every line, and `redact` does so in any other text (the step's outcome).

Airflow's SecretsMasker (airflow/sdk/_shared/secrets_masker) is the model, without importing it (its import is most of
what a step would pay for Airflow): the same sensitive names (DEFAULT_SENSITIVE_FIELDS, matched as Airflow matches
them: lower case, non-word runs as '_', a substring), the same minimum length (5; shorter values would mask ordinary
words), "airflow" never masked, and a connection's password and the values of its extra's sensitive keys registered as
Airflow registers them. Beyond it: a value under a sensitive key is masked whole, however deep (Airflow's add_mask
forgets the key one level down), and each secret is also masked in the forms a line may spell it in: URL-quoted (a
connection URI), JSON-escaped (a JSON text) and repr-escaped (a %r argument).

Where Airflow's masker is loaded in this process already (a step run by today's operator classes), every secret
registered here goes to it too, so both mask the same values.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import threading
from typing import Any
from urllib.parse import quote

# Airflow's DEFAULT_SENSITIVE_FIELDS (airflow/sdk/_shared/secrets_masker/secrets_masker.py), copied: the step does not
# import Airflow, and a name Airflow finds sensitive must be masked here too.
SENSITIVE_NAMES = frozenset({
    "access_key", "access_token", "api_key", "apikey", "auth_header", "authorization", "bearer", "connection_string",
    "dsn", "passphrase", "passwd", "password", "private_key", "proxy", "proxy_password", "proxies", "secret",
    "service_account", "service_key", "token", "keyfile_dict", "webhook_url",
})
MIN_LENGTH = 5  # Airflow's [logging] min_length_masked_secret default
_NEVER_MASKED = {"airflow"}
REPLACEMENT = "***"
_AIRFLOW_MASKER = "airflow.sdk._shared.secrets_masker"

_lock = threading.Lock()
_secrets: set[str] = set()
_pattern: re.Pattern[str] | None = None


def is_sensitive_name(name: Any) -> bool:
    """Whether a value under this name (an extra's key, a variable's name) is a secret, as Airflow decides it."""
    if not isinstance(name, str):
        return False
    normalized = re.sub(r"\W+", "_", name.strip().lower())
    return any(sensitive in normalized for sensitive in SENSITIVE_NAMES)


def _spellings(secret: str) -> set[str]:
    return {secret, quote(secret), quote(secret, safe=""), json.dumps(secret)[1:-1], repr(secret)[1:-1]}


def register(secret: Any, name: str | None = None) -> None:
    """Mask `secret` from now on: a string; a dict (its values under sensitive keys, masked whole, at any depth); a list
    (its items). With `name`, only when the name is sensitive (as Airflow's mask_secret)."""
    if name is not None and not is_sensitive_name(name):
        if isinstance(secret, (dict, list, tuple)):
            _register_walk(secret, sensitive=False)
        return
    _register_walk(secret, sensitive=True)


def _register_walk(value: Any, sensitive: bool) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            _register_walk(item, sensitive or is_sensitive_name(key))
    elif isinstance(value, (list, tuple, set)):
        for item in value:
            _register_walk(item, sensitive)
    elif sensitive and value is not None and not isinstance(value, bool):
        _add(str(value))


def _add(secret: str) -> None:
    global _pattern
    if len(secret) < MIN_LENGTH or secret.lower() in _NEVER_MASKED:
        return
    airflow_masker = sys.modules.get(_AIRFLOW_MASKER)
    if airflow_masker is not None:  # not imported here: only where the process loaded it already
        airflow_masker._secrets_masker().add_mask(secret)
    with _lock:
        new = {s for s in _spellings(secret) if len(s) >= MIN_LENGTH} - _secrets
        if not new:
            return
        _secrets.update(new)
        # longest first: a secret that contains another is replaced whole
        _pattern = re.compile("|".join(re.escape(s) for s in sorted(_secrets, key=len, reverse=True)))


def redact(text: str) -> str:
    """`text` with every registered secret (in each of its spellings) replaced by ***."""
    pattern = _pattern
    if pattern is None or not isinstance(text, str):
        return text
    return pattern.sub(REPLACEMENT, text)


def forget_all() -> None:
    """No secret is masked any more (tests)."""
    global _pattern
    with _lock:
        _secrets.clear()
        _pattern = None


class MaskingFilter(logging.Filter):
    """A handler's filter that redacts the registered secrets in a record: its message with its arguments (formatted
    here, so a secret in any argument's str or repr is caught), its traceback and its stack."""

    def filter(self, record: logging.LogRecord) -> bool:
        if _pattern is None:
            return True
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a bad format string: logging reports it, with the arguments redacted
            message = None
        if message is not None:
            record.msg, record.args = redact(message), ()
        else:
            record.msg = redact(str(record.msg))
            record.args = tuple(redact(repr(arg)) for arg in (record.args or ()))
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True


def mask_handlers(logger: logging.Logger | None = None) -> MaskingFilter:
    """Put a MaskingFilter on every handler of `logger` (the root logger): a record is filtered by the handlers that
    write it, whichever logger made it. Returns the filter."""
    masking = MaskingFilter()
    for handler in (logger or logging.getLogger()).handlers:
        if not any(isinstance(existing, MaskingFilter) for existing in handler.filters):
            handler.addFilter(masking)
    return masking


__all__ = ["MIN_LENGTH", "MaskingFilter", "REPLACEMENT", "SENSITIVE_NAMES", "forget_all", "is_sensitive_name",
           "mask_handlers", "redact", "register"]
