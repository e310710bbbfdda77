"""QuietLog: a repeating failure is said once at WARNING, then at DEBUG; its recovery once, with
how long it lasted."""

from __future__ import annotations

import logging

import pytest

from gpu_admission.process.quiet_log import QuietLog


def levels(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
    return [(r.levelname, r.getMessage()) for r in caplog.records]


def test_a_repeat_is_quiet_a_change_is_said_and_a_recovery_once(caplog) -> None:
    caplog.set_level(logging.DEBUG, logger="quiet-test")
    now = [100.0]
    quiet = QuietLog(logging.getLogger("quiet-test"), clock=lambda: now[0])
    assert quiet.failed("lease", "lease: namespace missing")
    now[0] = 104.0
    assert not quiet.failed("lease", "lease: namespace missing")
    assert quiet.failed("lease", "lease: forbidden")
    assert quiet.current() == {"lease": "lease: forbidden"}
    now[0] = 112.5  # the condition began with the first failure, whatever it said since
    quiet.recovered("lease", "lease: renewed again")
    quiet.recovered("lease", "lease: renewed again")  # nothing to recover from any more
    assert levels(caplog) == [
        ("WARNING", "lease: namespace missing"),
        ("DEBUG", "lease: namespace missing (still)"),
        ("WARNING", "lease: forbidden"),
        ("INFO", "lease: renewed again after 12.5 s"),
    ]


def test_keys_are_bounded(monkeypatch) -> None:
    monkeypatch.setattr(QuietLog, "MAX_KEYS", 3)
    quiet = QuietLog(logging.getLogger("quiet-test"))
    for key in range(10):
        quiet.failed(key, "failing")
    assert len(quiet.current()) <= 3
