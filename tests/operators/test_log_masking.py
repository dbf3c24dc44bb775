"""operators/log_masking.py: the secrets a step reads never reach its log or its outcome in clear, in any spelling a
line may give them, and what only looks like a secret's name (a channel "tokenizer") is left alone."""

import json
import logging
from urllib.parse import quote

import pytest

from operators import log_masking


@pytest.fixture(autouse=True)
def _fresh():
    log_masking.forget_all()
    yield
    log_masking.forget_all()


@pytest.fixture
def logged():
    """A logger writing through a masked handler: (logger, the lines written)."""
    lines: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record):
            lines.append(self.format(record))

    root = logging.getLogger("masking-test")
    handler = Collect()
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    root.propagate = False
    log_masking.mask_handlers(root)
    yield root, lines
    root.removeHandler(handler)


SECRET = 'pa/ss"wo\\rd+1'


def test_a_registered_secret_is_masked_in_messages_args_reprs_and_tracebacks(logged):
    logger, lines = logged
    log_masking.register(SECRET)
    logger.info("plain %s", SECRET)
    logger.info("repr %r", {"password": SECRET})
    logger.info(f"in the message itself {SECRET}")
    logger.info("as JSON %s", json.dumps({"key": SECRET}))
    logger.info("in a URI aws://AK:%s@/", quote(SECRET, safe=""))
    try:
        raise RuntimeError(f"boom {SECRET}")
    except RuntimeError:
        logger.exception("failed")
    text = "\n".join(lines)
    assert SECRET not in text and json.dumps(SECRET)[1:-1] not in text and repr(SECRET)[1:-1] not in text
    assert quote(SECRET, safe="") not in text
    assert text.count("***") >= 6 and "boom ***" in text


def test_redact_masks_the_outcomes_text_and_leaves_other_values():
    log_masking.register(SECRET)
    outcome = json.dumps({"result": {"tokenizer": {"uri": "s3://b/tok"}, "note": f"x {SECRET}"}})
    redacted = json.loads(log_masking.redact(outcome))
    assert redacted == {"result": {"tokenizer": {"uri": "s3://b/tok"}, "note": "x ***"}}


def test_an_extras_values_are_masked_by_airflows_sensitive_names_at_any_depth():
    log_masking.register({"region_name": "eu-west-1", "aws_session_token": "session-token-value",
                          "config_kwargs": {"proxies": {"https": "http://user:proxy-pass@proxy:3128"}},
                          "endpoint_url": "http://minio:9000"}, "extra")
    text = log_masking.redact("eu-west-1 session-token-value http://user:proxy-pass@proxy:3128 http://minio:9000")
    assert text == "eu-west-1 *** *** http://minio:9000"
    assert log_masking.is_sensitive_name("AWS-Secret-Access-Key") and not log_masking.is_sensitive_name("region")


def test_short_values_and_airflow_are_never_masked(logged):
    logger, lines = logged
    log_masking.register("abcd")
    log_masking.register("airflow")
    logger.info("abcd airflow")
    assert lines == ["abcd airflow"]


def test_a_secret_registered_later_is_masked_from_then_on(logged):
    logger, lines = logged
    logger.info("early %s", "late-secret-1")
    log_masking.register("late-secret-1")
    logger.info("later %s", "late-secret-1")
    assert lines == ["early late-secret-1", "later ***"]
