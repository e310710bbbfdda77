"""`gpu-admission load` (what loader Jobs run) starts without the service's imports."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
from commands.cli import main
status = main(["load", "--source", "s3://Bad_Bucket", "--termination-log", sys.argv[1]])
loaded = ("aiohttp", "kubernetes", "webhooks.dispatch.registry")
heavy = sorted(m for m in loaded if m in sys.modules)
print(status, ",".join(heavy))
"""


def test_load_runs_without_importing_the_service(tmp_path):
    result = subprocess.run(
        [sys.executable, "-c", PROBE, str(tmp_path / "termination-log")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    status, heavy = result.stdout.split()[0], result.stdout.split()[1:]
    assert status == "2", result.stderr  # the bad bucket name is a usage error
    assert heavy == [], f"load imported {heavy}"
    assert "Bad_Bucket" in result.stderr
