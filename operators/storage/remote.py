"""S3 endpoints of Airflow connections: per connection id, what errors need to know, the settings the obstore engine
needs (read from the connection, no botocore client), and a boto3 client built on first use only.

Credentials and the boto3 session come from the amazon provider's AwsBaseHook, so everything Airflow supports
for AWS connections works (login/password, profiles, assume-role, AIRFLOW_CONN_<ID> variables, secrets
backends); in a data-plane step (operators/step_process.py) from the AIRFLOW_CONN_<ID> variable, read without Airflow
(storage/env_connections.py), but for what only the hook supports. The connection extra carries `endpoint_url`, `region_name` (or `region`) and `addressing_style`
("path" / "virtual"); a `config_kwargs` dict in the extra is merged over our botocore defaults.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urlsplit

from botocore import UNSIGNED  # botocore's package alone: a constant, none of its client machinery

from operators import log_masking
from operators.step_process import is_step_process
from operators.storage import checksums
from operators.storage.addressing import client_problem, resolve_addressing
from operators.storage.env_connections import (
    ConnectionFormatError,
    EnvAwsHook,
    airflow_needed,
    read_env_connection,
)
from operators.storage.errors import StorageError, display_endpoint
from operators.storage.location import (
    DEFAULT_CONNECTIONS,
    StorageLocation,
    connection_env_name,
)
from operators.storage.retries import REQUEST_RETRIES

log = logging.getLogger("operators.storage.hook")

_AWS_HOST_SUFFIXES = (".amazonaws.com", ".amazonaws.com.cn", ".api.aws")

def _utc():
    """botocore's UTC tzinfo (dateutil's tzutc), so our datetimes are the ones botocore would have made."""
    # lazy: dateutil, for the botocore engine's responses only (a step's obstore listing parses no timestamp here)
    from dateutil.tz import tzutc

    return tzutc()


# Timeouts that keep an unreachable endpoint from hanging a task for minutes; the retries that ride out a flaky
# network and a store shedding load are in storage.retries.
CONNECT_TIMEOUT_S = 10
READ_TIMEOUT_S = 60


@dataclass(frozen=True)
class EngineSettings:
    """What another transfer engine (storage.obstore) needs to reach a bucket as this client does."""

    endpoint: str  # scheme://host[:port], the bucket's host when `virtual_hosted`
    region: str | None
    virtual_hosted: bool
    credentials: Any  # botocore Credentials (refreshable), or None for unsigned requests
    verify: Any  # the connection's TLS verification: True, False or a CA bundle path
    proxies: Any
    max_retries: int  # retries per request: ours (REQUEST_RETRIES) or the connection's config_kwargs
    signature_version: Any = None  # config_kwargs' signature_version (None: botocore's default, SigV4)


class Remote:
    """The S3 endpoint of one connection: what error messages say about it, the settings another engine needs
    (`engine_settings`, read from the connection), and its boto3 client, built on first use only: building one
    parses botocore's S3 model and endpoint rules (~0.3 s of CPU), and the obstore path (listing, downloads) needs
    none of it."""

    def __init__(self, client: Any = None, conn_id: str = "", endpoint: str | None = None, is_aws: bool = True, *,
                 connection: "_Connection | None" = None) -> None:
        self.conn_id = conn_id
        self.endpoint = endpoint
        self.is_aws = is_aws
        self._client = client
        self._connection = connection
        self._lock = threading.Lock()
        self._engine_settings: dict[str, EngineSettings] = {}
        self.engine_choice: dict[str, EngineSettings | None] = {}  # storage.obstore.store's switch, per bucket

    @property
    def client(self) -> Any:
        """The connection's boto3 S3 client (retries installed), built on first use by one thread."""
        with self._lock:
            if self._client is None:
                self._client = self._connection.build_client()
            return self._client

    @property
    def client_built(self) -> bool:
        return self._client is not None

    def engine_settings(self, bucket: str) -> EngineSettings:
        """The endpoint, addressing style, region and credentials botocore uses for `bucket`.

        Read from the connection (storage.addressing has botocore's rules) without building a client; where those
        rules do not cover the connection, or the client exists anyway, the URL botocore builds for a GET says."""
        with self._lock:
            known = self._engine_settings.get(bucket)
        if known is None:
            settings = None
            if self._connection is not None and self._client is None:
                settings = self._connection.engine_settings(bucket)
            known = settings or self.engine_settings_from_client(bucket)
            with self._lock:
                self._engine_settings[bucket] = known
        return known

    def engine_settings_from_client(self, bucket: str) -> EngineSettings:
        """engine_settings as botocore's client resolves them: the URL is the one botocore builds for a GET of the
        bucket (signed, then stopped before it is sent), so the host and the addressing style are the ones its
        endpoint rules chose. (Not a presigned URL: botocore presigns with AWS's global endpoint.)"""
        client = self.client
        credentials = getattr(getattr(client, "_request_signer", None), "_credentials", None)
        if credentials is not None:
            url = _request_url(client, bucket)
        else:
            url = client.meta.endpoint_url + f"/{bucket}/k"
        parts = urlsplit(url)
        virtual = (parts.hostname or "").lower().startswith(bucket.lower() + ".")
        session = getattr(getattr(client, "_endpoint", None), "http_session", None)
        return EngineSettings(
            endpoint=f"{parts.scheme}://{parts.netloc}",
            region=client.meta.region_name,
            virtual_hosted=virtual,
            credentials=credentials,
            verify=getattr(session, "_verify", True),
            proxies=client.meta.config.proxies,
            max_retries=_max_retries(client.meta.config.retries),
            signature_version=client.meta.config.signature_version,
        )


def install_checksums(client) -> None:
    """Make `client` ask for and send checksums as storage.checksums wants them.

    - Every GetObject and HeadObject asks for the checksums the store keeps (x-amz-checksum-mode: ENABLED), which
      the downloads verify with instead of MD5. A request header, so presigned links (no before-call) stay
      unchanged: a browser could not send it.
    - An upload request that names its checksum algorithm (checksums.UPLOAD_ARGS) gets the value of its body in a
      header, computed here in C before botocore would: botocore itself puts it in an aws-chunked trailer over
      https, which some S3-compatible stores refuse, and request_checksum_calculation="when_required" does not
      stop that once the request names an algorithm."""
    events = client.meta.events
    for operation in ("GetObject", "HeadObject"):
        events.register(f"before-call.s3.{operation}", _ask_for_checksums, unique_id=f"storage-checksums-{operation}")
    for operation in ("PutObject", "UploadPart"):
        events.register(f"before-call.s3.{operation}", _checksum_in_header, unique_id=f"storage-checksums-{operation}")


def _ask_for_checksums(params, **_) -> None:
    params["headers"][checksums.MODE_HEADER] = "ENABLED"


def _checksum_in_header(params, **_) -> None:
    headers = params["headers"]
    algorithm = checksums.UPLOAD_ALGORITHM
    # x-amz-sdk-checksum-algorithm: what botocore serialised from the request's ChecksumAlgorithm parameter
    if (headers.get("x-amz-sdk-checksum-algorithm") or "").lower() != algorithm.name or algorithm.header in headers:
        return
    headers[algorithm.header] = algorithm.encode(checksums.of_body(params.get("body") or b"", algorithm))


class _NotSent(Exception):
    """Raised by _request_url's hook: the request was built and signed; it is not to be sent."""


def _request_url(client, bucket: str) -> str:
    """The URL botocore would send a GET of key 'k' in `bucket` to (nothing is sent)."""
    seen: list[str] = []

    def stop(request, **_):
        seen.append(request.url)
        raise _NotSent

    client.meta.events.register_first("before-send.s3.GetObject", stop, unique_id="storage-request-url")
    try:
        client.get_object(Bucket=bucket, Key="k")
    except _NotSent:
        pass
    finally:
        client.meta.events.unregister("before-send.s3.GetObject", unique_id="storage-request-url")
    return seen[0]


class _Connection:
    """What make_remote read from an Airflow connection, and how to build its client or its engine settings."""

    def __init__(self, hook, loc: StorageLocation, endpoint: str | None, region: str | None,
                 options: dict[str, Any], own_config: Any = None) -> None:
        self.hook = hook
        self.loc = loc
        self.endpoint = endpoint
        self.region = region
        self.options = options  # our botocore Config options
        self.own_config = own_config  # the connection's config_kwargs as a botocore Config, merged over ours
        self._config = None
        self._session = None
        self._lock = threading.Lock()

    @property
    def config(self):
        """The client's botocore Config: our options, the connection's config_kwargs over them (made on first use)."""
        if self._config is None:
            from botocore.config import Config  # lazy: botocore's client machinery, with the client or its settings

            config = Config(**self.options)
            self._config = config.merge(self.own_config) if self.own_config is not None else config
        return self._config

    def _option(self, name: str) -> Any:
        """One of the Config's options without making the Config where the connection sets none of its own."""
        if self.own_config is None:
            return self.options.get(name)
        return getattr(self.config, name)

    def session(self):
        """The connection's boto3 session (AwsBaseHook: keys, profiles, assume-role; no S3 model is parsed), made
        once (an assume-role connection calls STS for it)."""
        with self._lock:
            if self._session is None:
                self._session = self.hook.get_session(region_name=self.region)
            return self._session

    def build_client(self):
        try:
            client = self.hook.get_client_type(region_name=self.region, config=self.config)
        except ValueError as err:  # bad endpoint_url / region strings that make_remote's checks let through
            raise StorageError(
                f"cannot use connection '{self.hook.aws_conn_id}' for {self.loc.uri}: {err}; check endpoint_url and "
                "region_name in its extra",
                permanent=True,
            ) from None
        from operators.storage.remote_retries import install  # lazy: with the client (botocore's retry machinery)

        install(client)
        install_checksums(client)
        return client

    def engine_settings(self, bucket: str) -> EngineSettings | None:
        """engine_settings from the connection alone, or None where botocore's client has to be asked."""
        if self._option("use_fips_endpoint") or self._option("use_dualstack_endpoint"):
            return None
        light = getattr(self.hook, "static_settings", None)
        static = light(self.region) if light is not None else None
        if static is not None:  # a step's connection with its own keys and nothing of botocore's to consult
            return self._settings(bucket, static.region_name, lambda: static.credentials,
                                  dict(self._option("s3") or {}), static.verify)
        session = self.session()
        core = getattr(session, "_session", None)  # boto3 keeps its botocore session here
        if core is None:
            return None
        if not self.endpoint:
            # Endpoints and variants configured outside the connection (environment, ~/.aws/config) are botocore's.
            if any(name.startswith("AWS_ENDPOINT_URL") for name in os.environ):
                return None
            scoped = core.get_scoped_config() or {}
            if "endpoint_url" in scoped or "services" in scoped:
                return None
            if core.get_config_variable("use_fips_endpoint") or core.get_config_variable("use_dualstack_endpoint"):
                return None
        s3_config = dict(core.get_config_variable("s3") or {})
        s3_config.update(self._option("s3") or {})
        unsigned = self._option("signature_version") in (UNSIGNED, "unsigned")
        verify = self.hook.verify  # then botocore's defaults, in botocore's order (session, then endpoint)
        if verify is None:
            verify = core.get_config_variable("ca_bundle")
        if verify is None:
            verify = os.environ.get("REQUESTS_CA_BUNDLE", True)
        return self._settings(bucket, session.region_name, lambda: None if unsigned else session.get_credentials(),
                              s3_config, verify)

    def _settings(self, bucket: str, region: str | None, credentials, s3_config: dict,
                  verify: Any) -> EngineSettings | None:
        """EngineSettings for `bucket` where storage.addressing knows botocore's answer, else None. `credentials`:
        called once the addressing is known."""
        resolved = resolve_addressing(self.endpoint, region, s3_config, bucket)
        if resolved is None:
            return None
        endpoint, virtual = resolved
        return EngineSettings(
            endpoint=endpoint,
            region=region or "us-east-1",
            virtual_hosted=virtual,
            credentials=credentials(),
            verify=verify,
            proxies=self._option("proxies"),
            max_retries=_max_retries(self._option("retries")),
            signature_version=self._option("signature_version"),
        )


def _max_retries(retries: dict | None) -> int:
    """botocore's retry setting as a count of retries: `total_max_attempts` counts the first attempt too."""
    retries = retries or {}
    if retries.get("total_max_attempts") is not None:
        return max(0, int(retries["total_max_attempts"]) - 1)
    return max(0, int(retries.get("max_attempts", REQUEST_RETRIES)))


def is_aws_endpoint(endpoint: str | None) -> bool:
    if not endpoint:
        return True
    host = (urlsplit(endpoint).hostname or "").lower()
    return host.endswith(_AWS_HOST_SUFFIXES)


def fast_timestamp(value: Any):
    """botocore's timestamp parser, minus dateutil for the two formats S3 sends (same aware UTC datetimes).

    botocore parses every timestamp with dateutil (~40 us each): a listing of 10,000 objects spent ~0.4 s of CPU
    on its LastModified values alone, a third of a warm cache check. ISO 8601 with 'Z' (listings) and RFC 1123
    with 'GMT' (headers) go through the standard library (~1-3 us); anything else through botocore as before.
    """
    if isinstance(value, str):
        try:
            if value.endswith("Z") and "T" in value:
                return datetime.fromisoformat(value[:-1]).replace(tzinfo=_utc())
            if value.endswith(" GMT"):
                return parsedate_to_datetime(value).replace(tzinfo=_utc())
        except (TypeError, ValueError):
            pass
    from botocore.utils import parse_timestamp  # lazy: botocore's client machinery (see make_remote)

    return parse_timestamp(value)


_shared_loader = None  # botocore's data loader of the first session of this process, with its caches
_shared_loader_lock = threading.Lock()


def share_data_loader(botocore_session) -> None:
    """Make `botocore_session` read botocore's JSON data (the S3 service model, endpoint rules: ~0.3 s of CPU, two
    thirds of a warm cache check) through the loader of the first session of this process, which has it parsed
    already. Each AwsBaseHook builds a fresh session, and a long-lived process builds many: the API server one per
    artifact link, a task one per hook."""
    global _shared_loader
    with _shared_loader_lock:
        if _shared_loader is None:
            _shared_loader = botocore_session.get_component("data_loader")
        else:
            botocore_session.register_component("data_loader", _shared_loader)


def forget_data_loader() -> None:
    """The next session parses botocore's data again, as the first session of a fresh process does (benchmarks)."""
    global _shared_loader
    with _shared_loader_lock:
        _shared_loader = None


def tune_session(session) -> None:
    """Make a boto3 session parse timestamps with `fast_timestamp` and share this process's data loader."""
    botocore_session = getattr(session, "_session", None)  # boto3 keeps its botocore session here
    try:
        factory = botocore_session.get_component("response_parser_factory")
        factory.set_parser_defaults(timestamp_parser=fast_timestamp)
        share_data_loader(botocore_session)
    except Exception:  # noqa: BLE001 - optimisations only: botocore's parser and loader work as well
        log.debug("could not install the fast timestamp parser or the shared data loader", exc_info=True)


def _aws_hook_class():
    """AwsBaseHook whose sessions parse timestamps with `fast_timestamp` (everything else is the provider's)."""
    # lazy: Airflow's amazon provider; cache/ imports this module through the storage hook without Airflow
    from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook

    class StorageAwsHook(AwsBaseHook):
        def get_session(self, *args, **kwargs):
            session = super().get_session(*args, **kwargs)
            tune_session(session)
            return session

    return StorageAwsHook


def _env_hook(loc: StorageLocation, conn_id: str) -> EnvAwsHook | None:
    """In a data-plane step (operators/step_process.py): the connection from its AIRFLOW_CONN_<ID> variable, read
    without Airflow; None where Airflow's hook must read it (said in one line)."""
    if not is_step_process():
        return None
    try:
        conn = read_env_connection(conn_id)
    except ConnectionFormatError as err:
        raise StorageError(f"cannot read connection '{conn_id}' for {loc.uri}: {err}; fix that key of the storage "
                           "Secret", permanent=True) from None
    why = airflow_needed(conn)
    if why:
        log.info("connection %r is read through Airflow's AWS hook: %s", conn_id, why)
        return None
    if conn is not None and (conn.conn_type or "aws") != "aws":  # AwsConnectionWrapper's warning; it reads it anyway
        log.warning("connection %r is of type %r, not aws; it might not work correctly", conn_id, conn.conn_type)
    return EnvAwsHook(conn_id, conn, tune_session)


def _register_secrets(wrapper) -> None:
    """A connection Airflow's hook read: its secrets for operators/log_masking.py too (a step's log may go through it
    alone)."""
    if wrapper:
        log_masking.register(wrapper.password)
        log_masking.register(wrapper.aws_secret_access_key)
        log_masking.register(wrapper.aws_session_token)
        log_masking.register(dict(wrapper.extra_config or {}), "extra")


def make_remote(loc: StorageLocation, conn_id: str, concurrency: int) -> Remote:
    """Build the S3 client of connection `conn_id` (used for `loc`, which error messages name)."""
    aws = _env_hook(loc, conn_id) or _aws_hook_class()(aws_conn_id=conn_id, client_type="s3")
    try:
        wrapper = aws.conn_config
        if not isinstance(aws, EnvAwsHook):
            _register_secrets(wrapper)
    except Exception as err:  # noqa: BLE001 - a malformed connection; its text may hold the secret
        log.debug("reading connection %r failed: %s", conn_id, type(err).__name__)
        raise StorageError(
            f"cannot read Airflow connection '{conn_id}' for {loc.uri} ({type(err).__name__}); "
            "check that it is a valid connection of type aws",
            permanent=True,
        ) from None
    if not wrapper and not (loc.scheme == "s3" and conn_id == DEFAULT_CONNECTIONS["s3"]):
        # Only plain s3:// with the default id may fall back to boto3's own credential chain (instance
        # roles, env vars); for cos/oss/obs or a named connection there is no sane default endpoint.
        env_name = connection_env_name(conn_id)
        raise StorageError(
            f"connection '{conn_id}' for {loc.uri} is not defined; create an Airflow connection of type aws "
            f"(or set {env_name}) with login/password and extra endpoint_url, region_name, addressing_style",
            permanent=True,
        )
    extra = dict(wrapper.extra_config or {}) if wrapper else {}
    endpoint = wrapper.get_service_endpoint_url("s3") if wrapper else None
    region = (wrapper.region_name if wrapper else None) or extra.get("region") or None
    if loc.scheme != "s3" and not endpoint:
        raise StorageError(
            f"connection '{conn_id}' for {loc.uri} has no endpoint_url in its extra; set the {loc.scheme.upper()} "
            "endpoint (e.g. https://cos.<region>.myqcloud.com, https://oss-<region>.aliyuncs.com, "
            "https://obs.<region>.myhuaweicloud.com)",
            permanent=True,
        )
    is_aws = is_aws_endpoint(endpoint)

    # botocore Config's options, as a dict: the Config itself is made with the client (botocore.config imports
    # botocore's client machinery, ~0.2 s of CPU, which the obstore engine does not need)
    options: dict[str, Any] = dict(
        retries={"mode": "standard", "max_attempts": REQUEST_RETRIES},
        # small-object workers and s3transfer's ranged GETs can run at the same time: room for both
        max_pool_connections=max(10, 2 * concurrency + 4),
        connect_timeout=CONNECT_TIMEOUT_S,
        read_timeout=READ_TIMEOUT_S,
        tcp_keepalive=True,
    )
    addressing_style = extra.get("addressing_style") or (extra.get("s3") or {}).get("addressing_style")
    if addressing_style:
        options["s3"] = {"addressing_style": addressing_style}
    if not is_aws:
        # boto3 >= 1.36 sends CRC checksums / aws-chunked bodies by default, which many S3-compatible stores
        # reject; our uploads send a CRC64NVME in a plain header where the store takes one
        # (botocore.uploads.store_takes_checksums, install_checksums), and we verify sizes, CRCs and MD5s ourselves.
        options.update(request_checksum_calculation="when_required", response_checksum_validation="when_required")
    # the connection's config_kwargs (a botocore Config) win over ours
    own_config = wrapper.botocore_config if wrapper else None
    # What building the client would refuse, refused now: the client itself is built on first use (or never).
    problem = client_problem(endpoint, region)
    if problem:
        raise StorageError(
            f"cannot use connection '{conn_id}' for {loc.uri}: {problem}; check endpoint_url and region_name in its "
            "extra",
            permanent=True,
        )
    log.debug(
        "object storage connection %r: endpoint %s, region %s, addressing %s, aws=%s",
        conn_id,
        display_endpoint(endpoint),
        region,
        addressing_style or "auto",
        is_aws,
    )
    return Remote(conn_id=conn_id, endpoint=endpoint, is_aws=is_aws,
                  connection=_Connection(aws, loc, endpoint, region, options, own_config))


__all__ = ["CONNECT_TIMEOUT_S", "EngineSettings", "READ_TIMEOUT_S", "Remote", "install_checksums", "is_aws_endpoint",
           "make_remote"]
