"""One signed S3 GET with the standard library (the runtime has no dependencies).

Used for ``sagemaker_submit_directory``. Endpoint: ``$S3_ENDPOINT_URL`` (path-style
addressing, e.g. a store on loopback or an S3-compatible service), else
``https://<bucket>.s3.<region>.amazonaws.com``. Region: ``$AWS_REGION``, else
``$SAGEMAKER_REGION``, else ``$AWS_DEFAULT_REGION``, else us-east-1. Credentials:
``$AWS_ACCESS_KEY_ID`` / ``$AWS_SECRET_ACCESS_KEY`` (/ ``$AWS_SESSION_TOKEN``), else the
profile of ``~/.aws/credentials`` (``$AWS_SHARED_CREDENTIALS_FILE``, ``$AWS_PROFILE``);
without credentials the request is sent unsigned (public objects). Requests are signed
with AWS Signature Version 4.
"""

import configparser
import datetime
import hashlib
import hmac
import os
import urllib.error
import urllib.parse
import urllib.request

CHUNK = 1 << 20
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


class NotFound(Exception):
    """The object does not exist or we may not read it (404 / 403)."""


def download(uri, destination, environ, timeout=60):
    """Write the object at ``s3://bucket/key`` to ``destination``; returns its size."""
    parsed = urllib.parse.urlparse(uri)
    bucket, key = parsed.netloc, parsed.path.lstrip("/")
    region = (environ.get("AWS_REGION") or environ.get("SAGEMAKER_REGION")
              or environ.get("AWS_DEFAULT_REGION") or "us-east-1")
    endpoint = environ.get("S3_ENDPOINT_URL")
    quoted_key = urllib.parse.quote(key, safe="/~")
    if endpoint:
        url = "%s/%s/%s" % (endpoint.rstrip("/"), bucket, quoted_key)
    else:
        url = "https://%s.s3.%s.amazonaws.com/%s" % (bucket, region, quoted_key)
    request = urllib.request.Request(url, headers=_signed_headers(url, region, _credentials(environ)))
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response, open(destination, "wb") as out:
            size = 0
            for chunk in iter(lambda: response.read(CHUNK), b""):
                out.write(chunk)
                size += len(chunk)
            return size
    except urllib.error.HTTPError as error:
        if error.code in (403, 404):
            raise NotFound("%d %s" % (error.code, error.reason)) from None
        raise OSError("HTTP %d %s from %s" % (error.code, error.reason, url)) from None
    except urllib.error.URLError as error:
        raise OSError("%s: %s" % (url, error.reason)) from None


def _credentials(environ):
    if environ.get("AWS_ACCESS_KEY_ID") and environ.get("AWS_SECRET_ACCESS_KEY"):
        return environ["AWS_ACCESS_KEY_ID"], environ["AWS_SECRET_ACCESS_KEY"], environ.get("AWS_SESSION_TOKEN")
    path = environ.get("AWS_SHARED_CREDENTIALS_FILE") or os.path.join(os.path.expanduser("~"), ".aws", "credentials")
    parser = configparser.RawConfigParser()
    try:
        parser.read(path)
    except (OSError, configparser.Error):
        return None
    profile = environ.get("AWS_PROFILE") or "default"
    if parser.has_option(profile, "aws_access_key_id") and parser.has_option(profile, "aws_secret_access_key"):
        return (parser.get(profile, "aws_access_key_id"), parser.get(profile, "aws_secret_access_key"),
                parser.get(profile, "aws_session_token", fallback=None))
    return None


def _signed_headers(url, region, credentials, now=None):
    if credentials is None:
        return {}
    access_key, secret_key, token = credentials
    now = now or datetime.datetime.now(datetime.timezone.utc)
    amz_date, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    parsed = urllib.parse.urlsplit(url)
    headers = {"host": parsed.netloc, "x-amz-content-sha256": EMPTY_SHA256, "x-amz-date": amz_date}
    if token:
        headers["x-amz-security-token"] = token
    names = sorted(headers)
    canonical = "\n".join([
        "GET", parsed.path or "/", parsed.query, "".join("%s:%s\n" % (n, headers[n]) for n in names),
        ";".join(names), EMPTY_SHA256,
    ])
    scope = "%s/%s/s3/aws4_request" % (day, region)
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = ("AWS4" + secret_key).encode()
    for part in (day, region, "s3", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    headers["Authorization"] = "AWS4-HMAC-SHA256 Credential=%s/%s, SignedHeaders=%s, Signature=%s" % (
        access_key, scope, ";".join(names), signature)
    del headers["host"]  # urllib sends the same Host itself
    return headers
