"""SIGTERM while the loader is not yet copying.

In a loader pod the loader is the container's PID 1, and the kernel delivers no signal to PID 1
that has no handler for it: SIGTERM is simply dropped. A loader pod deleted while it lists its
source (its PVC deleted, or its source edited, mid-listing) then lives out the whole grace
period (30 s by default) until the kubelet kills it, holding the volume and a load slot all the
while. Under `stopped_by_sigterm()` SIGTERM raises `Stopped` instead: a child process run with
`subprocess.run` is killed on the way out, and the loader ends at once with its summary. While
rclone copies, `loaders.rclone` forwards SIGTERM to it instead, so rclone ends cleanly; an
`hf://` load runs under `stopped_by_sigterm()` throughout.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from types import FrameType

STOPPED_EXIT_CODE = 128 + signal.SIGTERM  # what a shell reports for a process ended by SIGTERM
STOPPED_CAUSE = "the loader was stopped before the copy finished"


class Stopped(BaseException):
    """SIGTERM arrived: the pod is being deleted. A BaseException, as KeyboardInterrupt is: no
    `except Exception` on its way out (a library's retry loop) may swallow it."""


def _stop(_signum: int, _frame: FrameType | None) -> None:
    raise Stopped


@contextlib.contextmanager
def stopped_by_sigterm() -> Iterator[None]:
    """Within: SIGTERM raises Stopped (main thread only, as every signal handler)."""
    previous = signal.signal(signal.SIGTERM, _stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
