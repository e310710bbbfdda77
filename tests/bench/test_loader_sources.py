"""The source-loader benchmark runs end to end on a tiny dataset: each backend's two contenders
copy the same files, and the figures it prints and writes are complete (no timing asserted)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from bench.loader_sources import main
from tests.world.stand_ins.azurite import AzuriteMissing, azurite_path

pytestmark = pytest.mark.e2e


def test_every_backend_is_measured_against_its_bare_tool(tmp_path: Path) -> None:
    backends = ["https", "hf"]
    try:
        azurite_path()
        backends.append("az")
    except AzuriteMissing:
        if os.environ.get("CI"):
            raise
    out = tmp_path / "figures.json"
    for backend in backends:
        args = ["--backend", backend, "--rounds", "1", "--small-files", "6", "--large-files", "1"]
        assert main([*args, "--large-mib", "1", "--json", str(out)]) == 0
        figures = json.loads(out.read_text())
        result = figures[backend]
        assert figures["files"] == 7
        assert set(result["median_seconds"]) == {"bare", "load"}
        assert len(result["round_ratios"]) == 1 and result["ratio"] > 0
