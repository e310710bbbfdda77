"""Backoff, Retry-After and error descriptions of the informer (pure functions)."""

from __future__ import annotations

import json

import pytest
from kubernetes.client.exceptions import ApiException

from gpu_admission.cluster.informer import (
    Backoff,
    describe_error,
    meta_namespace_key,
    retry_after_seconds,
    retry_delay,
)


def api_error(
    status: int, headers: dict[str, str] | None = None, message: str = ""
) -> ApiException:
    error = ApiException(status=status, reason="Reason")
    error.headers = headers
    error.body = json.dumps({"kind": "Status", "message": message}) if message else None
    return error


@pytest.mark.parametrize(
    ("attempt", "expected"), [(0, 0.5), (1, 1.0), (2, 2.0), (5, 16.0), (6, 30.0), (500, 30.0)]
)
def test_backoff_doubles_up_to_the_maximum(attempt, expected):
    assert Backoff().delay(attempt, rand=lambda: 0.0) == expected


def test_backoff_jitter_adds_at_most_its_fraction_and_never_passes_the_maximum():
    backoff = Backoff(initial=1.0, maximum=30.0, jitter=0.2)
    assert backoff.delay(0, rand=lambda: 1.0) == pytest.approx(1.2)
    assert backoff.delay(10, rand=lambda: 1.0) == 30.0


def test_retry_after_wins_over_the_backoff():
    error = api_error(429, {"Retry-After": "3"})
    assert retry_after_seconds(error) == 3.0
    assert retry_delay(error, attempt=0, backoff=Backoff()) == 3.0


def test_retry_after_is_capped_by_the_maximum_backoff():
    assert retry_delay(api_error(503, {"Retry-After": "600"}), 0, Backoff(maximum=30)) == 30.0


@pytest.mark.parametrize("headers", [None, {}, {"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}])
def test_without_a_usable_retry_after_the_backoff_applies(headers):
    error = api_error(500, headers)
    assert retry_after_seconds(error) is None
    assert Backoff().delay(3, rand=lambda: 0.0) <= retry_delay(error, 3, Backoff()) <= 4.0 * 1.2


def test_connection_errors_use_the_backoff():
    assert retry_delay(ConnectionResetError("reset"), 1, Backoff(jitter=0)) == 1.0


def test_error_descriptions_carry_the_status_message():
    assert describe_error(api_error(500, message="etcd unavailable")) == (
        "HTTP 500 Reason: etcd unavailable"
    )
    assert describe_error(api_error(403)) == "HTTP 403 Reason"
    assert describe_error(ConnectionResetError("reset")) == "ConnectionResetError: reset"


def test_keys_are_namespace_slash_name_or_name():
    assert meta_namespace_key({"metadata": {"namespace": "a", "name": "b"}}) == "a/b"
    assert meta_namespace_key({"metadata": {"name": "node-1"}}) == "node-1"
