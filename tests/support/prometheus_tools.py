"""Debian's `prometheus` package's binaries (`promtool`, `prometheus`): where a test needs one,
it is skipped without it, with the reason, and fails under CI, whose .ci/run installs it."""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpu_admission.gpus.idle_series import IDLE_RULE_GROUP


def prometheus_binary(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        if os.environ.get("CI"):
            pytest.fail(f"{name} is missing: .ci/run installs Debian's prometheus package")
        pytest.skip(f"{name} is not installed (apt-get install prometheus); CI runs this")
    return found


def short_idle_window(spec: dict[str, Any]) -> dict[str, Any]:
    """The idle rules' hour made 10 seconds and their minutes 2 seconds (two minutes 4), for a
    test only (a
    real hour is promtool's to test: tests/manifests/monitoring/rules_test.yaml); every other
    rule as kustomize renders it. A copy: the rendered spec is shared by every test."""
    spec = copy.deepcopy(spec)
    (group,) = [g for g in spec["groups"] if g["name"] == IDLE_RULE_GROUP]
    group["interval"] = "1s"
    shortened = 0
    for rule in group["rules"]:
        before = rule["expr"]
        rule["expr"] = before.replace("[1h]", "[10s]").replace("[1m]", "[2s]")
        rule["expr"] = rule["expr"].replace("[2m]", "[4s]")
        rule["expr"] = rule["expr"].replace(">= 55", ">= 7")
        shortened += rule["expr"] != before
    assert shortened == 6, "the idle rules changed form: shorten them here as they are now"
    return spec


def start_prometheus(
    binary: str, folder: Path, rules: dict[str, Any], target: str, port: int
) -> subprocess.Popen[bytes]:
    """The real Prometheus, scraping `target` every second and evaluating `rules` (a
    PrometheusRule's spec) every second unless a group says otherwise; its log in `folder`."""
    (folder / "rules.yaml").write_text(yaml.safe_dump(rules, sort_keys=False))
    (folder / "prometheus.yml").write_text(
        yaml.safe_dump(
            {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "rule_files": [str(folder / "rules.yaml")],
                "scrape_configs": [
                    {
                        "job_name": "gpu-usage",
                        "honor_labels": True,  # as the PodMonitor asks
                        "static_configs": [{"targets": [target]}],
                    }
                ],
            }
        )
    )
    return subprocess.Popen(
        [
            binary,
            f"--config.file={folder / 'prometheus.yml'}",
            f"--storage.tsdb.path={folder / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=(folder / "prometheus.log").open("wb"),
        stderr=subprocess.STDOUT,
    )
