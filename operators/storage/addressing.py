"""Where botocore sends a bucket's requests (the host, and virtual-hosted or path style), worked out without a botocore
client: building one parses botocore's S3 service model and endpoint rules (~0.3 s of CPU), most of a warm cache
hit in a fresh task process, and the obstore engine needs only the answer.

These are the rules of botocore's S3 endpoint rule set for the cases a connection gives us (botocore's own presigned
URLs are the judge: tests/operators/storage/test_addressing.py). Anything else (accelerate, dual-stack, FIPS, regional
us-east-1, endpoints with a path, partitions other than aws and aws-cn, endpoints configured outside the connection)
returns None, and the caller asks botocore itself.
"""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import urlsplit

# botocore's client_endpoint_url rules: with a custom endpoint only `addressing_style: virtual` leaves path style
# (botocore.args.compute_endpoint_resolver_builtin_defaults); without one, AWS's default is virtual-hosted.
_S3_KEYS_WE_KNOW = {"addressing_style", "payload_signing_enabled"}
_AWS_REGION = re.compile(r"^(us|eu|ap|sa|ca|me|af|il|mx)-\w+-\d+$")
_AWS_CN_REGION = re.compile(r"^cn-\w+-\d+$")
_HOST_LABEL = re.compile(r"^[a-z0-9][a-z0-9-]*[a-z0-9]$")
_IP_LIKE = re.compile(r"^\d+\.\d+\.\d+\.\d+$")


def virtual_hostable(bucket: str, allow_dots: bool) -> bool:
    """The rule set's aws.isVirtualHostableS3Bucket: a DNS-safe bucket name (labels of [a-z0-9-], 3-63 chars)."""
    if not 3 <= len(bucket) <= 63 or _IP_LIKE.match(bucket):
        return False
    labels = bucket.split(".") if allow_dots else [bucket]
    return all(len(label) == 1 and label.isalnum() and label == label.lower() or _HOST_LABEL.match(label)
               for label in labels) and (allow_dots or "." not in bucket)


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
        return True
    except ValueError:
        return False


def resolve_addressing(endpoint_url: str | None, region: str | None, s3_config: dict | None,
                       bucket: str) -> tuple[str, bool] | None:
    """(scheme://host[:port] that requests for `bucket` go to, virtual-hosted?) as botocore resolves it, or None
    when botocore has to be asked (a case these rules do not cover)."""
    s3_config = dict(s3_config or {})
    if set(s3_config) - _S3_KEYS_WE_KNOW:
        return None
    style = s3_config.get("addressing_style") or "auto"
    if style not in ("auto", "path", "virtual"):
        return None
    if endpoint_url:
        parts = urlsplit(endpoint_url)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/") \
                or parts.query or "s3-accelerate" in parts.hostname or ":" in parts.hostname:  # IPv6: botocore's
            return None
        base = f"{parts.scheme}://{parts.netloc}"
        if style != "virtual":
            return base, False
        # The rule set's order: a dot-free name goes virtual unless the host is an IP address; over plain http a
        # dotted name goes virtual too (no certificate to mismatch), whatever the host.
        if virtual_hostable(bucket, allow_dots=False):
            return (base, False) if _is_ip(parts.hostname) else (f"{parts.scheme}://{bucket}.{parts.netloc}", True)
        if parts.scheme == "http" and virtual_hostable(bucket, allow_dots=True):
            return f"{parts.scheme}://{bucket}.{parts.netloc}", True
        return base, False
    region = region or "us-east-1"
    if region == "us-east-1":
        host = "s3.amazonaws.com"  # botocore's legacy us-east-1 global endpoint
    elif _AWS_REGION.match(region):
        host = f"s3.{region}.amazonaws.com"
    elif _AWS_CN_REGION.match(region):
        host = f"s3.{region}.amazonaws.com.cn"
    else:
        return None
    if style != "path" and virtual_hostable(bucket, allow_dots=False):
        return f"https://{bucket}.{host}", True
    return f"https://{host}", False


__all__ = ["resolve_addressing", "virtual_hostable"]


# botocore.utils' checks of what a client is built with (is_valid_endpoint_url, validate_region_name), here so that
# checking a connection imports no botocore: botocore.utils imports botocore.compat (awscrt, urllib3: ~0.2 s of CPU),
# a third of a data-plane step's cache hit, which reaches the store through obstore without any botocore client.
# tests/operators/storage/test_addressing.py holds them to botocore's answers; IPv6 endpoints are botocore's to check.
_UNSAFE_URL_CHARS = frozenset("\t\r\n")
_ENDPOINT_HOST = re.compile(r"^((?!-)[A-Z\d-]{1,63}(?<!-)\.)*((?!-)[A-Z\d-]{1,63}(?<!-))$", re.IGNORECASE)
_REGION_NAME = re.compile(r"^(?![0-9]+$)(?!-)[a-zA-Z0-9-]{,63}(?<!-)$")


def client_problem(endpoint_url: str | None, region: str | None) -> str | None:
    """What building a botocore client for this endpoint and region would refuse (botocore's words), or None."""
    if endpoint_url:
        if _UNSAFE_URL_CHARS.intersection(endpoint_url):
            return f"Invalid endpoint: {endpoint_url}"
        try:
            host = urlsplit(endpoint_url).hostname
        except ValueError:
            host = None
        if host is not None and ":" in host:  # IPv6: botocore's own check
            # lazy: botocore.utils (see above), for an IPv6 endpoint only
            from botocore.utils import is_valid_ipv6_endpoint_url

            if not is_valid_ipv6_endpoint_url(endpoint_url):
                return f"Invalid endpoint: {endpoint_url}"
        elif host is None or len(host) > 255 or not _ENDPOINT_HOST.match(host[:-1] if host.endswith(".") else host):
            return f"Invalid endpoint: {endpoint_url}"
    if region is not None and not _REGION_NAME.match(region):
        return f"Provided region_name '{region}' doesn't match a supported format."
    return None
