"""bench.controller's paired comparison: each round runs both checkouts' controllers, in turn,
first one then the other, and the report pairs them round by round."""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from bench import controller as bench
from bench.controller_figures import paired
from tests import ROOT


def figures(cpu_seconds: float, last_job: float | None) -> dict[str, Any]:
    return {
        "pvcs": 100,
        "controller_cpu_seconds": cpu_seconds,
        "all_jobs_seen_seconds_after_burst": last_job,
        "bare_client_jobs_seconds": 1.0,
        "last_job_over_bare_client": last_job,
    }


def test_pairs_are_reported_side_by_side_with_who_was_lower() -> None:
    here = [figures(0.15, 0.5), figures(0.20, None), figures(0.18, 0.4)]
    there = [figures(0.25, 0.6), figures(0.19, 0.7), figures(0.22, 0.3)]
    summary = paired(here, there)
    cpu = summary["controller CPU per PVC (ms)"]
    assert cpu["this"] == {"median": 1.8, "min": 1.5, "max": 2.0}
    assert cpu["compared"] == {"median": 2.2, "min": 1.9, "max": 2.5}
    assert cpu["lower_here"] == 2 and len(cpu["pairs"]) == 3
    # A round where a figure is missing (its last Job never came) drops out of that pairing.
    assert summary["last Job after the burst (s)"]["pairs"] == [(0.5, 0.6), (0.4, 0.3)]


def test_the_order_within_a_pair_alternates(monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[Path | None] = []

    def burst(args: argparse.Namespace, tree: Path | None = None) -> dict[str, Any]:
        ran.append(tree)
        return figures(0.2, 0.5)

    monkeypatch.setattr(bench, "burst", burst)
    monkeypatch.setattr(bench, "print_burst", lambda f: None)
    other = Path("/elsewhere")
    here, there = bench.compare_rounds(argparse.Namespace(rounds=3, compare=other))
    assert ran == [None, other, other, None, None, other]
    assert len(here) == len(there) == 3


def test_a_compared_checkout_runs_its_own_controller_against_the_same_server(
    real_cluster: Any, tmp_path: Path
) -> None:
    """A real burst (a few PVCs) with this checkout's controller and with a copy's. The bench
    starts API servers of its own, from the binaries `real_cluster` needs (skipped without)."""
    copy = tmp_path / "copy"
    parts = ("bench", "gpu_admission", "controllers", "commands", "webhooks", "certs", "loaders")
    for part in parts:
        shutil.copytree(ROOT / part, copy / part, ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path / "figures.json"
    argv = ["burst", "--pvcs", "6", "--threads", "2", "--compare", str(copy), "--json", str(out)]
    assert bench.main(argv) == 0
    result = json.loads(out.read_text())["burst"]
    (here,), (there,) = result["this"], result["compared"]["rounds"]
    assert here["controller_tree"] == str(bench.HERE)
    assert there["controller_tree"] == str(copy)
    assert here["jobs_seen"] == there["jobs_seen"] == 6
    assert result["paired"]["controller CPU per PVC (ms)"]["pairs"]
