import pytest

from operators.links import ModelArtifactsLink, console_url
from operators.stages import PublishModelOperator, UploadArtifactsOperator


@pytest.mark.parametrize("uri, link", [
    ("s3://b/models/j/output/model.tar.gz", "https://s3.console.aws.amazon.com/s3/buckets/b?prefix=models/j/output/"),
    ("cos://b/models/j/output/model.tar.gz", "https://console.cloud.tencent.com/cos/bucket?bucket=b&path=/models/j/output/"),
    ("/data/models/j/output/model.tar.gz", "file:///data/models/j/output/model.tar.gz"),
])
def test_artifact_links_open_the_console_folder_of_the_model(uri, link):
    assert console_url(uri) == link


def test_the_publish_and_upload_tasks_show_the_link():
    for operator in (PublishModelOperator, UploadArtifactsOperator):
        assert [type(link) for link in operator.operator_extra_links] == [ModelArtifactsLink]
