"""Reachability: an outage is said in two lines however many callers fail and retry meanwhile;
which errors count as the server not answering."""

from __future__ import annotations

import logging

import pytest
import urllib3.exceptions
from kubernetes.client.exceptions import ApiException

from gpu_admission.process.reachability import Reachability, unreachable_reason


def said(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
    return [(r.levelname, r.getMessage()) for r in caplog.records]


@pytest.fixture
def clock() -> list[float]:
    return [1000.0]


@pytest.fixture
def api(caplog: pytest.LogCaptureFixture, clock: list[float]) -> Reachability:
    caplog.set_level(logging.DEBUG, logger="reach-test")
    return Reachability("the API server", logging.getLogger("reach-test"), lambda: clock[0])


def test_many_callers_failing_make_one_line_down_and_one_up(api, clock, caplog) -> None:
    for _ in range(5):
        clock[0] += 1
        api.lost("pods", "connection refused", "informer pods")
        api.lost("nodes", "connection refused", "informer nodes")
    assert api.down
    api.answered("pods")  # nodes still fails: not back yet
    assert api.down
    clock[0] = 1012.0
    api.answered("nodes")
    api.answered("nodes")  # nothing more to say
    out = [(level, text) for level, text in said(caplog) if level != "DEBUG"]
    assert out == [
        (
            "WARNING",
            "the API server cannot be reached (connection refused; first noticed by informer "
            "pods); retrying quietly until it answers",
        ),
        ("INFO", "the API server reachable again after 11.0 s (10 failed attempts meanwhile)"),
    ]
    assert sum(level == "DEBUG" for level, _ in said(caplog)) == 9


def test_a_caller_that_stops_while_failing_ends_the_outage_silently(api, caplog) -> None:
    api.lost("pods", "timed out", "informer pods")
    api.forget("pods")
    assert not api.down
    api.answered("pods")
    assert [level for level, _ in said(caplog)] == ["WARNING"]


def test_a_second_outage_is_said_again(api, caplog) -> None:
    for _ in range(2):
        api.lost("pods", "connection lost", "informer pods")
        api.answered("pods")
    assert [level for level, _ in said(caplog)] == ["WARNING", "INFO", "WARNING", "INFO"]


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (ApiException(status=503, reason="Service Unavailable"), "HTTP 503 Service Unavailable"),
        (ApiException(status=429, reason="Too Many Requests"), "HTTP 429 Too Many Requests"),
        (ApiException(status=403, reason="Forbidden"), None),  # an answer: said as it is
        (ApiException(status=404, reason="Not Found"), None),
        (
            urllib3.exceptions.MaxRetryError(
                None,  # type: ignore[arg-type]
                "/api/v1/pods",
                urllib3.exceptions.NewConnectionError(
                    None,  # type: ignore[arg-type]
                    "Failed to establish a new connection: [Errno 111] Connection refused",
                ),
            ),
            "connection refused",
        ),
        (urllib3.exceptions.ReadTimeoutError(None, "/api", "read timed out"), "timed out"),  # type: ignore[arg-type]
        (urllib3.exceptions.ProtocolError("Connection aborted."), "connection lost"),
        (ConnectionResetError(104, "reset"), "connection lost"),
        (ValueError("a bug"), None),
    ],
)
def test_what_counts_as_not_answering(error: BaseException, reason: str | None) -> None:
    assert unreachable_reason(error) == reason
