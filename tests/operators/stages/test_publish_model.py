"""The publish_model stage: the model URI is the pipeline's result; a run without a model fails saying why."""

from __future__ import annotations

import pytest
from airflow.sdk.exceptions import AirflowFailException

from operators.stages.publish_model import PublishModelOperator


def test_the_uploaded_model_is_published():
    upload = {"status": "succeeded", "model_uri": "s3://b/models/j/output/model.tar.gz", "artifacts": {}}
    assert PublishModelOperator(task_id="publish", upload=upload).execute({"run_id": "r"}) == upload["model_uri"]


@pytest.mark.parametrize("upload", [None, {"status": "failed", "model_uri": None}])
def test_nothing_to_publish_fails_naming_the_launch_task(upload):
    with pytest.raises(AirflowFailException, match="no model to publish: training did not succeed"):
        PublishModelOperator(task_id="publish", upload=upload).execute({"run_id": "r"})
