"""A storage connection read from its AIRFLOW_CONN_<ID> variable without Airflow, for a data-plane step
(operators/step_process.py), which gets its connections from the admin's storage Secret that way (docs/kubernetes.md,
"storage_secret") and must not pay ~2 s of Airflow's imports to read them.

It stands in for the amazon provider's AwsBaseHook in operators/storage/remote.py (make_remote), reading what the hook
reads (AwsConnectionWrapper): the credentials (login/password, else the extra's aws_access_key_id /
aws_secret_access_key, else its session_kwargs; aws_session_token), region_name, endpoint_url (service_config.s3's
first), verify and config_kwargs, and building the boto3 session and client as the hook does. What it does not
support (assume role, profiles, a custom session factory, a secrets backend that Airflow would ask first) is left to
the hook: `airflow_needed` says why, and make_remote logs it and falls back.

Every secret read is registered with operators/log_masking.py, as Airflow's Connection registers it with its masker.
Errors are one line naming the variable, never its value.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Callable
from urllib.parse import parse_qsl, unquote, urlsplit

from operators import log_masking
from operators.storage.location import connection_env_name

EXTRA_KEY = "__extra__"  # Airflow's Connection.EXTRA_KEY: the whole extra as one JSON query value of a URI
# Where Airflow would ask something before the environment ([secrets] backend, [workers] secrets_backend) or build the
# session its own way ([aws] session_factory): set in a step's environment, the hook reads the connection.
_AIRFLOW_ONLY_ENV = ("AIRFLOW__SECRETS__BACKEND", "AIRFLOW__WORKERS__SECRETS_BACKEND", "AIRFLOW__AWS__SESSION_FACTORY")


class ConnectionFormatError(ValueError):
    """The variable holds no connection Airflow could read (the message names the variable, never its value)."""


@dataclass(frozen=True)
class EnvConnection:
    """A connection as Airflow's Connection holds it: its fields, and its extra as a dict."""

    conn_id: str
    conn_type: str | None = None
    host: str | None = None
    login: str | None = None
    password: str | None = field(default=None, repr=False)
    schema: str | None = None
    port: int | None = None
    extra: dict[str, Any] = field(default_factory=dict, repr=False)


def read_env_connection(conn_id: str, environ: Any = None) -> EnvConnection | None:
    """The connection in AIRFLOW_CONN_<CONN_ID> (JSON or URI, as Airflow reads it), its secrets registered with
    log_masking; None when the variable is not set or empty (Airflow skips an empty one too)."""
    environ = os.environ if environ is None else environ
    # Airflow's own name first (its environment backend upper-cases the id, nothing more), then the one the platform
    # names in its messages and checks the storage Secret for (other characters as '_')
    name = next((n for n in dict.fromkeys(["AIRFLOW_CONN_" + conn_id.upper(), connection_env_name(conn_id)])
                 if environ.get(n)), None)
    value = environ.get(name) if name else None
    if not value or not value.strip():
        return None
    value = value.strip()
    conn = _from_json(conn_id, name, value) if value.startswith("{") else _from_uri(conn_id, name, value)
    log_masking.register(conn.password)
    log_masking.register(conn.extra, "extra")  # the values under sensitive keys, as Airflow
    return conn


def _extra_dict(name: str, extra: Any) -> dict[str, Any]:
    if extra is None or extra == "":
        return {}
    if isinstance(extra, str):
        try:
            extra = json.loads(extra)
        except ValueError:
            raise ConnectionFormatError(f"{name}: its extra is not valid JSON") from None
    if not isinstance(extra, dict):
        raise ConnectionFormatError(f"{name}: its extra must be a JSON object, got a {type(extra).__name__}")
    return extra


def _from_json(conn_id: str, name: str, value: str) -> EnvConnection:
    """Airflow's Connection.from_json: the fields by name, `extra` as an object or a JSON string, port as an int."""
    try:
        fields = json.loads(value)
    except ValueError:
        raise ConnectionFormatError(f"{name} starts with '{{' but is not valid JSON; give the connection as a JSON "
                                    "object or an Airflow connection URI") from None
    if not isinstance(fields, dict):
        raise ConnectionFormatError(f"{name} must be a JSON object")
    unknown = sorted(set(fields) - {"conn_type", "host", "login", "password", "schema", "port", "extra", "description"})
    if unknown:  # Airflow's Connection(**fields) refuses them too
        raise ConnectionFormatError(f"{name}: unknown connection field(s) {', '.join(unknown)}; use conn_type, login, "
                                    "password, host, schema, port and extra")
    port = fields.get("port")
    if port:
        try:
            port = int(port)
        except (TypeError, ValueError):
            raise ConnectionFormatError(f"{name}: port must be an integer") from None
    conn_type = fields.get("conn_type")
    return EnvConnection(
        conn_id=conn_id, conn_type=_normalize_conn_type(conn_type) if conn_type else None, host=fields.get("host"),
        login=fields.get("login"), password=fields.get("password"), schema=fields.get("schema"), port=port or None,
        extra=_extra_dict(name, fields.get("extra")))


def _normalize_conn_type(conn_type: str) -> str:
    if conn_type == "postgresql":
        return "postgres"
    return conn_type.replace("-", "_")


# Hand-written because Airflow's own parser is Connection._parse_from_uri (airflow/models/connection.py; the Task SDK's
# Connection.from_uri is the same) in airflow-core, whose import is the cost a step avoids, and no library parses
# Airflow's URI form. Its rules, kept: the scheme is the conn_type ('-' -> '_'), a second '://' gives the host a
# protocol, login, password, host and schema are percent-decoded, `__extra__` holds the whole extra as JSON, else every
# query parameter is a key of the extra, its value JSON-decoded where it parses (airflow-core's rule; the Task SDK's
# keeps strings, with which a `config_kwargs` in a URI failed in a step).
def _from_uri(conn_id: str, name: str, uri: str) -> EnvConnection:
    schemes = uri.count("://")
    if schemes == 0 or schemes > 2:
        raise ConnectionFormatError(f"{name} is neither a JSON object nor an Airflow connection URI "
                                    "(aws://<login>:<password>@/?region_name=...)")
    try:
        parts = urlsplit(uri)
        conn_type = parts.scheme
        host_with_protocol = schemes == 2
        rest = uri.replace(f"{conn_type}://", "" if host_with_protocol else "//")
        if host_with_protocol:
            before = rest.split("://", 1)[0]
            if "@" in before or ":" in before:
                raise ConnectionFormatError(f"{name} is not a valid Airflow connection URI")
        parts = urlsplit(rest)
        host = _hostname(parts)
        if host and host_with_protocol:
            host = f"{parts.scheme}://{host}"
        schema = unquote(parts.path[1:]) if parts.path[1:] else parts.path[1:]
        login = unquote(parts.username) if parts.username else parts.username
        password = unquote(parts.password) if parts.password else parts.password
        port = parts.port
    except ValueError as err:  # a port that is no number; urlsplit's own refusals
        if isinstance(err, ConnectionFormatError):
            raise
        raise ConnectionFormatError(f"{name} is not a valid Airflow connection URI ({type(err).__name__})") from None
    extra: dict[str, Any] = {}
    if parts.query:
        query = dict(parse_qsl(parts.query, keep_blank_values=True))
        if EXTRA_KEY in query:
            extra = _extra_dict(name, query[EXTRA_KEY])
        else:
            for key, item in query.items():
                try:
                    extra[key] = json.loads(item) if item else item
                except ValueError:
                    extra[key] = item
    return EnvConnection(conn_id=conn_id, conn_type=_normalize_conn_type(conn_type) if conn_type else None,
                         host=host or None, login=login or None, password=password or None, schema=schema or None,
                         port=port, extra=extra)


def _hostname(parts) -> str:
    """Airflow's _parse_netloc_to_hostname: the host percent-decoded, its case kept where it holds a '/'."""
    hostname = unquote(parts.hostname or "")
    if "/" in hostname:
        hostname = parts.netloc
        if "@" in hostname:
            hostname = hostname.rsplit("@", 1)[1]
        if ":" in hostname:
            hostname = hostname.split(":", 1)[0]
        hostname = unquote(hostname)
    return hostname


def airflow_needed(conn: EnvConnection | None, environ: Any = None) -> str | None:
    """Why Airflow's hook must read this connection (a feature this reader does not have), or None."""
    environ = os.environ if environ is None else environ
    for name in _AIRFLOW_ONLY_ENV:
        if environ.get(name, "").strip():
            return f"{name} is set"
    if conn is None:
        return None
    extra = conn.extra
    for key in ("role_arn", "profile_name", "assume_role_method", "assume_role_kwargs"):
        if extra.get(key):
            return f"its extra sets {key}"
    for key in ("config_kwargs", "service_config", "session_kwargs"):
        if key in extra and not isinstance(extra[key], dict):
            return f"its extra's {key} is not an object"
    if extra.get("service_config") and not isinstance(extra["service_config"].get("s3", {}), dict):
        return "its extra's service_config.s3 is not an object"
    return None


@dataclass(frozen=True)
class StaticCredentials:
    """A connection's own keys, as botocore's Credentials hands them to the obstore engine (get_frozen_credentials);
    they never expire."""

    access_key: str
    secret_key: str = field(repr=False)
    token: str | None = field(default=None, repr=False)

    def get_frozen_credentials(self) -> StaticCredentials:
        return self


@dataclass(frozen=True)
class StaticSettings:
    """EnvAwsHook.static_settings: the region the session would have, its credentials, the TLS verification."""

    region_name: str | None
    credentials: StaticCredentials
    verify: Any


class EnvAwsConfig:
    """What make_remote reads from AwsBaseHook.conn_config (an AwsConnectionWrapper), for an EnvConnection; falsy
    without one (the default s3 connection not set: boto3's own credential chain), as the wrapper is."""

    def __init__(self, conn: EnvConnection | None) -> None:
        self.conn = conn
        extra = dict(conn.extra) if conn else {}
        self.extra_config = extra
        self.conn_type = (conn.conn_type or "aws") if conn else None
        self.region_name = extra.get("region_name") if "region_name" in extra else None
        self.verify = extra.get("verify")
        self.endpoint_url = extra.get("endpoint_url")
        self.service_config = extra.get("service_config") or {}
        self.aws_access_key_id, self.aws_secret_access_key, self.aws_session_token = self._credentials(conn, extra)
        config_kwargs = extra.get("config_kwargs")
        self.botocore_config = None
        if config_kwargs:
            # lazy: botocore's client machinery (~0.2 s of CPU), for a connection that sets botocore options only
            from botocore import UNSIGNED
            from botocore.config import Config

            config_kwargs = dict(config_kwargs)
            if config_kwargs.get("signature_version") == "unsigned":
                config_kwargs["signature_version"] = UNSIGNED
            self.botocore_config = Config(**config_kwargs)

    @staticmethod
    def _credentials(conn: EnvConnection | None, extra: dict) -> tuple[Any, Any, Any]:
        """AwsConnectionWrapper._get_credentials: login and password, else the extra's keys, else its
        session_kwargs'; the session token from the extra, else from session_kwargs."""
        if conn is None:
            return None, None, None
        session = extra.get("session_kwargs") or {}
        key_id, secret = extra.get("aws_access_key_id"), extra.get("aws_secret_access_key")
        if conn.login and conn.password:
            key_id, secret = conn.login, conn.password
        elif not (key_id and secret) and session.get("aws_access_key_id") and session.get("aws_secret_access_key"):
            key_id, secret = session["aws_access_key_id"], session["aws_secret_access_key"]
        token = extra.get("aws_session_token") or session.get("aws_session_token")
        for value in (secret, token):
            log_masking.register(value)
        return key_id, secret, token

    def __bool__(self) -> bool:
        return self.conn is not None

    def get_service_endpoint_url(self, service_name: str) -> str | None:
        return (self.service_config.get(service_name) or {}).get("endpoint_url", self.endpoint_url)

    def session_kwargs(self, region_name: str | None) -> dict[str, Any]:
        values = {"aws_access_key_id": self.aws_access_key_id, "aws_secret_access_key": self.aws_secret_access_key,
                  "aws_session_token": self.aws_session_token, "region_name": region_name or self.region_name}
        return {key: value for key, value in values.items() if value is not None}


class EnvAwsHook:
    """What make_remote's _Connection asks of AwsBaseHook (get_session, get_client_type, verify, aws_conn_id), built
    as the hook builds them (BaseSessionFactory.create_session, AwsGenericHook.get_client_type) from an EnvAwsConfig.
    `tune_session`: what remote.py does to every session the hook makes (its fast timestamp parser)."""

    def __init__(self, conn_id: str, conn: EnvConnection | None, tune_session: Callable[[Any], Any] | None = None):
        self.aws_conn_id = conn_id
        self._conn = conn
        self._tune_session = tune_session

    @cached_property
    def conn_config(self) -> EnvAwsConfig:
        """Read on first use, as AwsBaseHook.conn_config (make_remote turns its errors into one line)."""
        return EnvAwsConfig(self._conn)

    @property
    def verify(self) -> Any:
        return self.conn_config.verify

    def get_session(self, region_name: str | None = None):
        # lazy: boto3, ~0.1 s, imported by the first session only (the obstore path may build none)
        import boto3

        if not self.conn_config:
            session = boto3.session.Session(region_name=region_name or self.conn_config.region_name)
        else:
            session = boto3.session.Session(**self.conn_config.session_kwargs(region_name))
        if self._tune_session is not None:
            self._tune_session(session)
        return session

    def static_settings(self, region_name: str | None = None) -> StaticSettings | None:
        """What the obstore engine needs of a boto3 session (region, credentials, TLS verification), without boto3
        (~0.3 s of CPU with botocore's client machinery, half of a step's cache hit), where the session would only
        hand back what the connection says: its own keys, no botocore options of its own, and nothing else botocore
        reads (no AWS_* or BOTO_* variable, no ~/.aws). None otherwise: the session is asked (get_session)."""
        config = self.conn_config
        if not config or not (config.aws_access_key_id and config.aws_secret_access_key):
            return None
        if config.botocore_config is not None or any(name.startswith(("AWS_", "BOTO")) for name in os.environ):
            return None
        if os.path.exists(os.path.expanduser("~/.aws")):
            return None
        verify = config.verify if config.verify is not None else os.environ.get("REQUESTS_CA_BUNDLE", True)
        return StaticSettings(region_name or config.region_name,
                              StaticCredentials(config.aws_access_key_id, config.aws_secret_access_key,
                                                config.aws_session_token), verify)

    def get_client_type(self, region_name: str | None = None, config: Any = None):
        session = self.get_session(region_name=region_name)
        if config is None:  # as AwsBaseHook.config defaults it
            from botocore.config import Config  # lazy: with the client (see static_settings)

            config = self.conn_config.botocore_config or Config()
        return session.client("s3", endpoint_url=self.conn_config.get_service_endpoint_url("s3"), config=config,
                              verify=self.verify)


__all__ = ["ConnectionFormatError", "EnvAwsConfig", "EnvAwsHook", "EnvConnection", "StaticCredentials",
           "StaticSettings", "airflow_needed", "read_env_connection"]
