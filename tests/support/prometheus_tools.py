"""Debian's `prometheus` package's binaries (`promtool`, `prometheus`): where a test needs one,
it is skipped without it, with the reason, and fails under CI, whose .ci/run installs it."""

from __future__ import annotations

import os
import shutil

import pytest


def prometheus_binary(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        if os.environ.get("CI"):
            pytest.fail(f"{name} is missing: .ci/run installs Debian's prometheus package")
        pytest.skip(f"{name} is not installed (apt-get install prometheus); CI runs this")
    return found
