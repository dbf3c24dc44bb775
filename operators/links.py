"""Extra link from a training task to its model artifacts in the storage provider's console."""

from __future__ import annotations

from urllib.parse import quote

from airflow.sdk import BaseOperatorLink

CONSOLES = {
    "s3": "https://s3.console.aws.amazon.com/s3/buckets/{bucket}?prefix={key}",
    "cos": "https://console.cloud.tencent.com/cos/bucket?bucket={bucket}&path=/{key}",
    "oss": "https://oss.console.aliyun.com/bucket/oss/{bucket}/object?path={key}",
    "obs": "https://console.huaweicloud.com/console/#/obs/manager/buckets/{bucket}/objects?prefix={key}",
}


def console_url(uri: str) -> str:
    """The console page of the folder holding an artifact (a file:// URL for local paths)."""
    if "://" not in uri:
        return "file://" + quote(uri)
    scheme, rest = uri.split("://", 1)
    bucket, _, key = rest.partition("/")
    template = CONSOLES.get(scheme)
    return template.format(bucket=bucket, key=quote(key.rsplit("/", 1)[0] + "/")) if template else uri


class ModelArtifactsLink(BaseOperatorLink):
    name = "Model artifacts"

    def get_link(self, operator, *, ti_key) -> str:
        from airflow.sdk.execution_time.xcom import XCom

        value = XCom.get_value(ti_key=ti_key, key="return_value")
        uri = value.get("model_uri") if isinstance(value, dict) else value
        return console_url(uri) if isinstance(uri, str) and uri else ""
