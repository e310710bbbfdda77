"""Log lines: one per record, JSON or text, with structured fields; nothing from the kubernetes
client's request-body debug logging."""

from __future__ import annotations

import io
import json
import logging
import socket

import pytest
import urllib3

from gpu_admission.process.logging_setup import setup_logging


@pytest.fixture
def root_logger():
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    kube_level = logging.getLogger("kubernetes").level
    yield root
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)
    logging.getLogger("kubernetes").setLevel(kube_level)


def test_json_lines_carry_structured_fields(root_logger):
    stream = io.StringIO()
    setup_logging("info", "json", stream)
    logging.getLogger("webhooks.service.server").info(
        "admission denied", extra={"webhook": "/validate/pods", "code": 403}
    )
    entry = json.loads(stream.getvalue())
    assert entry["message"] == "admission denied"
    assert entry["level"] == "info"
    assert entry["logger"] == "webhooks.service.server"
    assert (entry["webhook"], entry["code"]) == ("/validate/pods", 403)
    assert stream.getvalue().count("\n") == 1


def test_json_exception_stays_on_one_line(root_logger):
    stream = io.StringIO()
    setup_logging("info", "json", stream)
    try:
        raise ValueError("broken policy")
    except ValueError:
        logging.getLogger("x").exception("policy failed")
    [line] = stream.getvalue().splitlines()
    assert "ValueError: broken policy" in json.loads(line)["exception"]


def test_text_lines_append_fields(root_logger):
    stream = io.StringIO()
    setup_logging("debug", "text", stream)
    logging.getLogger("commands.serve").debug("serving", extra={"https": ["0.0.0.0:8443"]})
    assert 'DEBUG commands.serve: serving https=["0.0.0.0:8443"]' in stream.getvalue()


def test_level_filters_and_kubernetes_debug_is_silenced(root_logger):
    stream = io.StringIO()
    setup_logging("debug", "json", stream)
    logging.getLogger("kubernetes.client.rest").debug("response body: {secret data}")
    setup_logging("warning", "json", stream)
    logging.getLogger("x").info("hidden")
    assert stream.getvalue() == ""


@pytest.mark.parametrize(("level", "fmt"), [("verbose", "json"), ("info", "xml")])
def test_bad_choices_are_refused(root_logger, level, fmt):
    with pytest.raises(ValueError, match="must be one of"):
        setup_logging(level, fmt, io.StringIO())


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]  # nothing listens once the probe is closed


@pytest.mark.parametrize(("level", "shown"), [("info", 0), ("debug", 2)])
def test_the_http_clients_retry_warnings_are_debug_lines(root_logger, level, shown):
    # urllib3 itself, retrying a refused connection twice, as the kubernetes client's pool does.
    stream = io.StringIO()
    setup_logging(level, "json", stream)
    pool = urllib3.PoolManager(retries=urllib3.Retry(total=2, backoff_factor=0))
    with pytest.raises(urllib3.exceptions.MaxRetryError):
        pool.request("GET", f"http://127.0.0.1:{closed_port()}/api")
    retries = [json.loads(line) for line in stream.getvalue().splitlines() if "Retrying" in line]
    assert len(retries) == shown
    assert all(entry["level"] == "debug" for entry in retries)
