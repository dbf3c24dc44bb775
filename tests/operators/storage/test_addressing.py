"""The obstore engine reaches a bucket where botocore would, read from the connection without a botocore client: for
each connection below, the settings worked out from the connection equal those botocore's own client gives (its
presigned URL's host and addressing style, region, credentials, TLS verification, proxies, retries)."""

from __future__ import annotations

import json
import os

import pytest
from botocore.exceptions import EndpointResolutionError
from botocore.utils import is_valid_endpoint_url, is_valid_ipv6_endpoint_url, validate_region_name

from operators.step_process import STEP_ENV
from operators.storage.addressing import client_problem
from operators.storage.location import parse_uri
from operators.storage.remote import make_remote

BUCKETS = ("bkt-1", "my.dotted.bucket", "Upper_Case", "ab", "a" * 63)

CONNECTIONS = {
    # AWS itself: no endpoint_url
    "aws us-east-1": {"region_name": "us-east-1"},
    "aws no region": {},
    "aws eu-west-1": {"region_name": "eu-west-1"},
    "aws eu-west-1 path": {"region_name": "eu-west-1", "addressing_style": "path"},
    "aws ap-southeast-2 virtual": {"region_name": "ap-southeast-2", "addressing_style": "virtual"},
    "aws cn-north-1": {"region_name": "cn-north-1"},
    "aws us-gov-west-1": {"region_name": "us-gov-west-1"},  # another partition: botocore is asked
    "aws fips": {"region_name": "us-east-2", "config_kwargs": {"use_fips_endpoint": True}},
    "aws dualstack": {"region_name": "us-east-2", "config_kwargs": {"s3": {"use_dualstack_endpoint": True}}},
    "aws accelerate": {"region_name": "us-east-2", "config_kwargs": {"s3": {"use_accelerate_endpoint": True}}},
    "aws regional us-east-1": {"region_name": "us-east-1",
                               "config_kwargs": {"s3": {"us_east_1_regional_endpoint": "regional"}}},
    # an AWS endpoint given explicitly: a custom endpoint to botocore (path style unless 'virtual')
    "aws endpoint given": {"endpoint_url": "https://s3.eu-west-1.amazonaws.com", "region_name": "eu-west-1"},
    # S3-compatible endpoints
    "https auto": {"endpoint_url": "https://cos.ap-guangzhou.myqcloud.com", "region_name": "ap-guangzhou"},
    "https virtual": {"endpoint_url": "https://oss-cn-hangzhou.aliyuncs.com", "region_name": "cn-hangzhou",
                      "addressing_style": "virtual"},
    "https path": {"endpoint_url": "https://obs.cn-north-4.myhuaweicloud.com", "region_name": "cn-north-4",
                   "addressing_style": "path"},
    "https port slash": {"endpoint_url": "https://s3.example.test:8443/", "addressing_style": "virtual"},
    "http virtual": {"endpoint_url": "http://s3.example.test:9000", "region_name": "ap-shanghai",
                     "addressing_style": "virtual"},
    "http auto no region": {"endpoint_url": "http://s3.example.test:9000"},
    "ip virtual": {"endpoint_url": "http://127.0.0.1:9000", "addressing_style": "virtual"},
    "ipv6 virtual": {"endpoint_url": "http://[::1]:9000", "addressing_style": "virtual"},
    "ip auto": {"endpoint_url": "http://10.1.2.3:9000"},
    "localhost virtual": {"endpoint_url": "http://localhost:9000", "addressing_style": "virtual"},
    "endpoint with a path": {"endpoint_url": "https://gw.example.test/s3", "addressing_style": "virtual"},
    "config_kwargs style": {"endpoint_url": "https://s3.example.test",
                            "config_kwargs": {"s3": {"addressing_style": "virtual"}}},
    "config_kwargs retries": {"endpoint_url": "https://s3.example.test",
                              "config_kwargs": {"retries": {"total_max_attempts": 4}}},
    "config_kwargs proxies": {"endpoint_url": "https://s3.example.test",
                              "config_kwargs": {"proxies": {"https": "http://proxy.example.test:3128"}}},
    "verify off": {"endpoint_url": "https://s3.example.test", "verify": False},
    "verify bundle": {"endpoint_url": "https://s3.example.test", "verify": "/etc/ssl/certs/ca-certificates.crt"},
}


@pytest.fixture(autouse=True)
def _no_aws_config_of_this_machine(monkeypatch, tmp_path):
    for name in ("AWS_PROFILE", "AWS_DEFAULT_REGION", "AWS_REGION", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3",
                 "AWS_USE_FIPS_ENDPOINT", "AWS_USE_DUALSTACK_ENDPOINT", "AWS_CA_BUNDLE", "AWS_MAX_ATTEMPTS",
                 "AWS_S3_US_EAST_1_REGIONAL_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))


def _remote(monkeypatch, extra: dict):
    connection = {"conn_type": "aws", "login": "AKIDEXAMPLE", "password": "secret-example", "extra": extra}
    monkeypatch.setenv("AIRFLOW_CONN_TABLE_STORE", json.dumps(connection))
    return make_remote(parse_uri("s3://bkt-1/x"), "table_store", 4)


def _comparable(settings):
    frozen = settings.credentials.get_frozen_credentials() if settings.credentials else None
    frozen = (frozen.access_key, frozen.secret_key, frozen.token) if frozen else None
    return (settings.endpoint, settings.virtual_hosted, settings.region, frozen, settings.verify, settings.proxies,
            settings.max_retries)


@pytest.mark.parametrize("case", sorted(CONNECTIONS))
def test_settings_from_the_connection_are_botocores(monkeypatch, case):
    compared = 0
    for bucket in BUCKETS:
        try:
            from_botocore = _remote(monkeypatch, CONNECTIONS[case]).engine_settings_from_client(bucket)
        except EndpointResolutionError:  # botocore refuses this bucket here (accelerate with dots): so do we
            with pytest.raises(EndpointResolutionError):
                _remote(monkeypatch, CONNECTIONS[case]).engine_settings(bucket)
            continue
        from_connection = _remote(monkeypatch, CONNECTIONS[case]).engine_settings(bucket)
        assert _comparable(from_connection) == _comparable(from_botocore), (case, bucket)
        compared += 1
    assert compared


def test_settings_for_a_plain_connection_build_no_botocore_client(monkeypatch):
    remote = _remote(monkeypatch, {"endpoint_url": "http://s3.example.test:9000", "region_name": "ap-guangzhou"})

    settings = remote.engine_settings("bkt-1")

    assert (settings.endpoint, settings.virtual_hosted) == ("http://s3.example.test:9000", False)
    assert not remote.client_built


@pytest.mark.parametrize("case", sorted(CONNECTIONS))
def test_a_steps_connection_with_its_own_keys_gives_botocores_settings_without_boto3(monkeypatch, tmp_path, case):
    """In a data-plane step (its connection read from the environment, operators/storage/env_connections.py) with
    nothing else botocore reads (no AWS_* variable, no ~/.aws), the settings come from the connection's own keys
    without a boto3 session, and are still botocore's."""
    monkeypatch.setenv(STEP_ENV, "{}")
    for name in [n for n in os.environ if n.startswith(("AWS_", "BOTO"))]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path))
    for bucket in BUCKETS:
        remote = _remote(monkeypatch, CONNECTIONS[case])
        try:
            from_connection = remote.engine_settings(bucket)
        except EndpointResolutionError:  # botocore refuses this bucket here (accelerate with dots)
            continue
        if "config_kwargs" not in CONNECTIONS[case]:
            assert remote._connection._session is None, "a boto3 session was made"
        assert _comparable(from_connection) == _comparable(_remote(monkeypatch, CONNECTIONS[case])
                                                           .engine_settings_from_client(bucket)), (case, bucket)


ENDPOINTS = ["https://s3.example.test", "http://127.0.0.1:9000", "http://[::1]:9000", "http://[fe80::1%25eth0]:1",
             "https://bad_host.example", "https://-bad.example", "http://", "https://s3.example.test.", "s3.example",
             "https://s3.example\n.test", "https://a" + "b" * 64 + ".test", "https://x." + "y." * 130 + "z",
             "http://[::1", "ftp://host"]
REGIONS = [None, "us-east-1", "ap-guangzhou", "123", "-x", "x-", "has space", "a" * 64, "", "UPPER-1"]


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_a_connections_endpoint_is_refused_where_botocore_refuses_it(endpoint):
    try:
        botocore_ok = bool(is_valid_endpoint_url(endpoint) or is_valid_ipv6_endpoint_url(endpoint))
    except ValueError:
        botocore_ok = False
    assert (client_problem(endpoint, None) is None) == botocore_ok


@pytest.mark.parametrize("region", REGIONS)
def test_a_connections_region_is_refused_where_botocore_refuses_it(region):
    try:
        validate_region_name(region)
        said = None
    except ValueError as err:
        said = str(err)
    assert client_problem(None, region) == said
