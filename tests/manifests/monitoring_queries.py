"""What the monitoring overlay asks Prometheus for: its rules, its dashboard's queries, and the
series they name. Shared by the overlay's own tests and the scrape test that checks every named
series is exposed by the running processes."""

from __future__ import annotations

import json
import re
from typing import Any

from tests.world.harness import render

OVERLAY = "manifests/overlays/monitoring"
# Series this project exports: gpu_admission_<name>. Recording rules are gpu_admission:<...>.
SERIES = re.compile(r"\bgpu_admission_[a-zA-Z0-9_]+")


def rendered() -> tuple[dict[str, Any], ...]:
    return render(OVERLAY)


def of_kind(kind: str) -> list[dict[str, Any]]:
    return [doc for doc in rendered() if doc["kind"] == kind]


def rule_spec() -> dict[str, Any]:
    [rule] = of_kind("PrometheusRule")
    return rule["spec"]


def rules() -> list[dict[str, Any]]:
    return [rule for group in rule_spec()["groups"] for rule in group["rules"]]


def alerts() -> list[dict[str, Any]]:
    return [rule for rule in rules() if "alert" in rule]


def dashboard() -> dict[str, Any]:
    [config_map] = [
        c for c in of_kind("ConfigMap") if c["metadata"]["name"] == "gpu-admission-dashboard"
    ]
    [text] = config_map["data"].values()
    return json.loads(text)


def dashboard_queries() -> list[str]:
    return [t["expr"] for p in dashboard()["panels"] for t in p.get("targets", [])]


# The node agent's series (manifests/overlays/gpu-usage): the kubelet's old names and its own.
# `serve` and `controller` expose none of them; the agent's own journey checks those
# (tests/gpu_usage).
AGENT_SERIES = re.compile(r"\bcontainer_accelerator_[a-z_]+|\bgpu_admission_(?:container|gpu)_\w+")


def named_series(agent: bool = False) -> dict[str, set[str]]:
    """Every series a rule or a dashboard query reads, with where it is read: the service's
    and the controller's (gpu_admission_*), or with `agent` the node agent's."""
    where: dict[str, set[str]] = {}
    sources = [(r.get("alert") or r["record"], r["expr"]) for r in rules()]
    sources += [("dashboard", expr) for expr in dashboard_queries()]
    for source, expr in sources:
        names = set(AGENT_SERIES.findall(expr))
        if not agent:
            names = set(SERIES.findall(expr)) - names
        for name in names:
            where.setdefault(name, set()).add(source)
    return where
