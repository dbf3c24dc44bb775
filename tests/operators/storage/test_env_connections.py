"""operators/storage/env_connections.py: a step's AIRFLOW_CONN_<ID> read without Airflow, as Airflow reads it (its
Connection and the amazon provider's AwsConnectionWrapper are the judges here), its secrets registered for masking,
and a bad value refused in one line naming the variable, never the value."""

import json
import logging
from urllib.parse import quote

import pytest
from airflow.models.connection import Connection
from airflow.providers.amazon.aws.utils.connection_wrapper import AwsConnectionWrapper
from botocore import UNSIGNED

from operators import log_masking
from operators.settings import TrainingSettings
from operators.step_process import STEP_ENV
from operators.storage.env_connections import (
    ConnectionFormatError,
    EnvAwsConfig,
    airflow_needed,
    read_env_connection,
)
from operators.storage.errors import StorageError
from operators.storage.hook import ObjectStorageHook
from operators.storage.location import parse_uri
from operators.storage.remote import make_remote

SECRET = "s3cr/et+k@y:%?&="  # every character a URI must percent-encode

URIS = [
    f"aws://AKID%2F1:{quote(SECRET, safe='')}@/?endpoint_url=http%3A%2F%2Fminio%3A9000&region_name=eu-west-1"
    "&addressing_style=path",
    "aws://AK:sk12345@/?__extra__=" + quote(json.dumps({"endpoint_url": "https://cos.x.myqcloud.com",
                                                         "config_kwargs": {"connect_timeout": 5}})),
    "aws://:@/?region_name=us-east-1&verify=false&config_kwargs=%7B%22signature_version%22%3A%22unsigned%22%7D",
    "aws://AK:pw12345@my-host:9000/some%20schema",
    "aws-x://http://user:pw12345@h.example:1?n=5&flag=true",
    "aws://",
]


@pytest.fixture(autouse=True)
def _fresh_masker():
    log_masking.forget_all()
    yield
    log_masking.forget_all()


@pytest.mark.parametrize("uri", URIS)
def test_a_uri_reads_as_airflows_connection_reads_it(uri):
    ours = read_env_connection("c", {"AIRFLOW_CONN_C": uri})
    theirs = Connection(conn_id="c", uri=uri)
    assert (ours.conn_type, ours.host, ours.login, ours.password, ours.schema, ours.port) == \
           (theirs.conn_type, theirs.host or None, theirs.login or None, theirs.password or None,
            theirs.schema or None, theirs.port)
    assert ours.extra == theirs.extra_dejson


@pytest.mark.parametrize("value", [
    {"conn_type": "aws", "login": "AKID", "password": SECRET, "extra": {"endpoint_url": "http://m:9000"}},
    {"conn_type": "aws", "login": "AKID", "password": SECRET, "extra": json.dumps({"region_name": "eu-west-1"})},
    {"conn_type": "aws", "extra": {"region_name": "us-east-1"}},
    {"conn_type": "aws", "host": "h", "port": "9000"},
])
def test_json_reads_as_airflows_connection_reads_it(value):
    text = json.dumps(value)
    ours = read_env_connection("c", {"AIRFLOW_CONN_C": text})
    theirs = Connection.from_json(text, conn_id="c")
    assert (ours.conn_type, ours.host, ours.login, ours.password, ours.port, ours.extra) == \
           (theirs.conn_type, theirs.host, theirs.login, theirs.password, theirs.port, theirs.extra_dejson)


@pytest.mark.parametrize("extra, login, password", [
    ({"endpoint_url": "http://m:9000", "region_name": "eu-west-1", "verify": False,
      "config_kwargs": {"signature_version": "unsigned", "connect_timeout": 3},
      "service_config": {"s3": {"endpoint_url": "http://s3only:9000"}}, "aws_session_token": "tok-12345"},
     "AKID", SECRET),
    ({"aws_access_key_id": "AK2", "aws_secret_access_key": "from-extra-1"}, None, None),
    ({"session_kwargs": {"aws_access_key_id": "AK3", "aws_secret_access_key": "from-session-1",
                         "aws_session_token": "tok-from-session"}}, None, None),
])
def test_the_aws_settings_are_the_amazon_providers(extra, login, password):
    value = json.dumps({"conn_type": "aws", "login": login, "password": password, "extra": extra})
    ours = EnvAwsConfig(read_env_connection("c", {"AIRFLOW_CONN_C": value}))
    theirs = AwsConnectionWrapper(Connection.from_json(value, conn_id="c"))
    for name in ("region_name", "verify", "aws_access_key_id", "aws_secret_access_key", "aws_session_token",
                 "extra_config"):
        assert getattr(ours, name) == getattr(theirs, name), name
    assert ours.get_service_endpoint_url("s3") == theirs.get_service_endpoint_url("s3")
    if theirs.botocore_config is None:
        assert ours.botocore_config is None
    else:
        assert ours.botocore_config.signature_version is UNSIGNED is theirs.botocore_config.signature_version
        assert ours.botocore_config.connect_timeout == theirs.botocore_config.connect_timeout


def test_the_secrets_read_are_masked_in_every_spelling():
    uri = f"aws://AKID:{quote(SECRET, safe='')}@/?aws_session_token=tok-54321&region_name=eu-west-1"
    read_env_connection("c", {"AIRFLOW_CONN_C": uri})
    for spelling in (SECRET, quote(SECRET, safe=""), json.dumps(SECRET)[1:-1], "tok-54321"):
        assert log_masking.redact(f"x {spelling} y") == "x *** y"
    assert log_masking.redact("AKID eu-west-1") == "AKID eu-west-1"  # a key id and a region are no secrets


@pytest.mark.parametrize("value, said", [
    ('{"conn_type": "aws", "password": "' + SECRET, "starts with '{' but is not valid JSON"),
    (json.dumps({"conn_type": "aws", "password": SECRET, "extra": "[1]"}), "its extra must be a JSON object"),
    (json.dumps({"conn_type": "aws", "password": SECRET, "extra": "{bad"}), "its extra is not valid JSON"),
    (json.dumps({"conn_type": "aws", "password": SECRET, "passwd": "x"}), "unknown connection field(s) passwd"),
    (json.dumps({"conn_type": "aws", "password": SECRET, "port": "ab"}), "port must be an integer"),
    (f"just-a-{SECRET}", "is neither a JSON object nor an Airflow connection URI"),
    (f"aws://AK:{SECRET}@h:notaport/", "is not a valid Airflow connection URI"),
])
def test_a_bad_value_is_one_line_naming_the_variable_never_the_value(value, said):
    with pytest.raises(ConnectionFormatError) as err:
        read_env_connection("my_cos", {"AIRFLOW_CONN_MY_COS": value})
    message = str(err.value)
    assert message.startswith("AIRFLOW_CONN_MY_COS") and said in message and "\n" not in message
    assert SECRET not in message and "s3cr" not in message


def test_what_only_airflow_supports_is_said():
    def why(extra, **env):
        return airflow_needed(read_env_connection("c", {"AIRFLOW_CONN_C": json.dumps({"extra": extra})}), env)

    assert why({"role_arn": "arn:aws:iam::1:role/x"}) == "its extra sets role_arn"
    assert why({"profile_name": "team"}) == "its extra sets profile_name"
    assert why({}, AIRFLOW__SECRETS__BACKEND="x.Backend") == "AIRFLOW__SECRETS__BACKEND is set"
    assert why({"region_name": "eu-west-1"}) is None
    assert airflow_needed(None, {}) is None  # no variable: boto3's own chain for the default s3 connection


def test_a_step_builds_its_remote_from_the_variable_and_says_when_it_falls_back(monkeypatch, caplog):
    monkeypatch.setenv(STEP_ENV, "{}")
    monkeypatch.setenv("AIRFLOW_CONN_STEP_COS", json.dumps({"conn_type": "aws", "login": "AK", "password": SECRET,
                                                            "extra": {"endpoint_url": "http://127.0.0.1:1",
                                                                      "region_name": "ap-x"}}))
    import operators.storage.remote as remote

    monkeypatch.setattr(remote, "_aws_hook_class", lambda: pytest.fail("Airflow's hook was asked"))
    built = make_remote(parse_uri("cos://b/k"), "step_cos", 4)
    assert built.endpoint == "http://127.0.0.1:1" and not built.is_aws
    settings = built.engine_settings("b")
    assert (settings.endpoint, settings.region, settings.credentials.secret_key) == ("http://127.0.0.1:1", "ap-x",
                                                                                      SECRET)
    assert built.client.meta.endpoint_url == "http://127.0.0.1:1" and built.client.meta.region_name == "ap-x"

    monkeypatch.setenv("AIRFLOW_CONN_STEP_COS", json.dumps({"extra": {"role_arn": "arn:aws:iam::1:role/x"}}))
    asked = []
    monkeypatch.setattr(remote, "_aws_hook_class", lambda: asked.append(1) or pytest.skip("asked"))
    with caplog.at_level(logging.INFO, "operators.storage.hook"), pytest.raises(pytest.skip.Exception):
        make_remote(parse_uri("cos://b/k"), "step_cos", 4)
    assert asked and "read through Airflow's AWS hook: its extra sets role_arn" in caplog.text


def test_a_step_without_the_variable_is_refused_in_one_line_but_plain_s3_uses_boto3s_chain(monkeypatch, tmp_path):
    monkeypatch.setenv(STEP_ENV, "{}")
    for name in ("AIRFLOW_CONN_NOWHERE", "AIRFLOW_CONN_AWS_DEFAULT", "AIRFLOW__SECRETS__BACKEND"):
        monkeypatch.delenv(name, raising=False)
    hook = ObjectStorageHook(connections={"cos": "nowhere"}, settings=TrainingSettings(workspace=str(tmp_path)))
    with pytest.raises(StorageError, match="connection 'nowhere' for cos://b/k is not defined; create an Airflow "
                                           "connection of type aws \\(or set AIRFLOW_CONN_NOWHERE\\)"):
        hook.store("cos://b/k").remote
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-central-1")
    default = make_remote(parse_uri("s3://b/k"), "aws_default", 4)
    assert default.endpoint is None and default.client.meta.region_name == "eu-central-1"


def test_a_bad_variable_in_a_step_is_a_storage_error_naming_it(monkeypatch):
    monkeypatch.setenv(STEP_ENV, "{}")
    monkeypatch.setenv("AIRFLOW_CONN_BROKEN", '{"password": "' + SECRET)
    with pytest.raises(StorageError) as err:
        make_remote(parse_uri("s3://b/k"), "broken", 4)
    assert "AIRFLOW_CONN_BROKEN" in str(err.value) and SECRET not in str(err.value) and err.value.permanent
