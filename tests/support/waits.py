"""Waiting on a condition while processes run: the tests that start the CLI or the image poll an
endpoint until it answers as expected, and fail at once (with the log) if a process dies."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any


def while_running(
    check: Callable[[], Any],
    what: str,
    processes: Mapping[str, subprocess.Popen[bytes]],
    timeout: float,
    log: Path | None = None,
) -> Any:
    """`check()`'s first truthy value, polled until `timeout`; an OSError from it (nothing
    listens yet) counts as not yet. Fails when a process exits first, or on time out."""

    def tail() -> str:
        return f":\n{log.read_text(errors='replace')[-3000:]}" if log is not None else ""

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for name, process in processes.items():
            assert process.poll() is None, f"{name} exited while waiting for {what}{tail()}"
        try:
            value = check()
        except OSError:
            value = None
        if value:
            return value
        time.sleep(0.1)  # polling a condition, bounded by the deadline
    raise AssertionError(f"timed out waiting for {what}{tail()}")
