"""How bench.controller reports its figures: percentiles, the burst's and the memory run's
printouts, the four headline figures over rounds, and two checkouts' rounds side by side."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile (the value at or below which `fraction` of them fall)."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * fraction // 1))  # ceil without floats drifting
    return ordered[int(rank) - 1]


def summary_ms(values: list[float]) -> dict[str, float]:
    millis = [v * 1000 for v in values]
    return {
        "p50_ms": percentile(millis, 0.50),
        "p99_ms": percentile(millis, 0.99),
        "max_ms": max(millis),
    }


def print_burst(f: dict[str, Any]) -> None:
    print(
        f"baseline: {f['pvcs']} unselected PVCs written in {f['baseline_burst_seconds']:.2f} s "
        f"({f['baseline_creates_per_second']:.0f}/s)"
    )
    print(
        f"burst:    {f['pvcs']} dataset PVCs written in {f['burst_seconds']:.2f} s "
        f"({f['burst_creates_per_second']:.0f}/s); Jobs seen {f['jobs_seen']}/{f['pvcs']}, "
        f"{f['jobs_before_burst_end']} before the burst ended"
    )
    for label, key in (
        ("job seen - PVC created", "job_minus_pvc_created"),
        ("job seen - burst end  ", "job_minus_burst_end"),
    ):
        s = f[key]
        if s:
            print(
                f"{label}: p50 {s['p50_ms']:8.0f} ms  p99 {s['p99_ms']:8.0f} ms  "
                f"max {s['max_ms']:8.0f} ms"
            )
    requests = dict(f["api_requests_during_burst"])
    requests["POST"] -= f["pvcs"]  # the writers' own creates
    per_pvc = {k: v / f["pvcs"] for k, v in requests.items()}
    print(
        "controller's API requests per PVC, until quiet: "
        + ", ".join(f"{k} {per_pvc[k]:.2f}" for k in requests)
        + f" (total {sum(per_pvc.values()):.2f})"
    )
    print(f"controller CPU per PVC: {1000 * f['controller_cpu_seconds'] / f['pvcs']:.2f} ms")
    if f["all_jobs_seen_seconds_after_burst"] is not None:
        print(
            f"last Job {f['all_jobs_seen_seconds_after_burst']:.2f} s after the burst; bare client "
            f"{f['pvcs']} Jobs in {f['bare_client_jobs_seconds']:.2f} s; "
            f"ratio {f['last_job_over_bare_client']:.2f}"
        )
    print(
        f"CPU from the burst's start to the last Job ({f['wall_seconds']:.1f} s): API server "
        f"{f['apiserver_cpu_seconds']:.1f} s, controller {f['controller_cpu_seconds']:.1f} s"
    )
    print(
        f"RSS: controller {f['controller_rss_mib']:.1f} MiB, "
        f"API server {f['apiserver_rss_mib']:.1f} MiB"
    )


HEADLINE = (
    ("controller CPU per PVC (ms)", lambda f: 1000 * f["controller_cpu_seconds"] / f["pvcs"]),
    ("last Job after the burst (s)", lambda f: f["all_jobs_seen_seconds_after_burst"]),
    ("bare client's Job burst (s)", lambda f: f["bare_client_jobs_seconds"]),
    ("ratio of the two", lambda f: f["last_job_over_bare_client"]),
)


def print_rounds(rounds: list[dict[str, Any]]) -> None:
    """The four headline figures over the rounds: median and spread (min to max)."""
    print(f"over {len(rounds)} rounds: median (min - max)")
    for label, figure in HEADLINE:
        values = [v for v in (figure(f) for f in rounds) if v is not None]
        if values:
            print(
                f"  {label:30} {statistics.median(values):7.2f} "
                f"({min(values):.2f} - {max(values):.2f})"
            )


def _spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def paired(here: list[dict[str, Any]], there: list[dict[str, Any]]) -> dict[str, Any]:
    """The headline figures of both checkouts, pair by pair: each side's median and spread, and
    in how many pairs this checkout's figure was the lower."""
    summary: dict[str, Any] = {}
    for label, figure in HEADLINE:
        pairs = [(figure(a), figure(b)) for a, b in zip(here, there, strict=True)]
        kept = [(a, b) for a, b in pairs if a is not None and b is not None]
        if kept:
            summary[label] = {
                "this": _spread([a for a, _ in kept]),
                "compared": _spread([b for _, b in kept]),
                "pairs": kept,
                "lower_here": sum(a < b for a, b in kept),
            }
    return summary


def print_paired(summary: dict[str, Any], compared: Path) -> None:
    print(f"this checkout against {compared}, pair by pair: median (min - max)")
    for label, s in summary.items():
        here, there = s["this"], s["compared"]
        print(
            f"  {label:30} here {here['median']:6.2f} ({here['min']:.2f} - {here['max']:.2f})"
            f"  compared {there['median']:6.2f} ({there['min']:.2f} - {there['max']:.2f})"
            f"  lower here in {s['lower_here']} of {len(s['pairs'])} pairs"
        )


def print_memory(f: dict[str, Any]) -> None:
    print(
        f"controller RSS with {f['watched_pvcs']} dataset PVCs watched ({f['cached']} cached): "
        f"before start {f['rss_before_start_mib']:.1f} MiB, after sync "
        f"{f['rss_after_sync_mib']:.1f} MiB, after reconciling all "
        f"{f['rss_after_reconcile_mib']:.1f} MiB (peak {f['peak_rss_mib']:.1f}); "
        f"idle process with the same imports {f['idle_rss_mib']:.1f} MiB"
    )
    print(
        f"cached {f['cached_pvcs']} PVCs, {f['cached_jobs']} Jobs; synced in "
        f"{f['sync_seconds']:.1f} s; {f['reconciles']} reconciles in "
        f"{f['reconcile_all_seconds']:.1f} s"
        + (" (TIMED OUT before all were reconciled)" if f["reconcile_timed_out"] else "")
        + "; "
        f"API writes {f['writes_during_run']}, reads {f['reads_during_run']}"
    )
