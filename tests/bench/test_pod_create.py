"""The pod-create benchmark's report: per-round ratios of the project's set-up to each baseline,
over the same round, never across rounds."""

from __future__ import annotations

from bench.pod_create import SETUPS, Sample, report

# (setup, round) -> how much slower than round 0's no-admission creates.
FACTOR = {
    ("none", 0): 1.0,
    ("go", 0): 2.0,
    ("project", 0): 3.0,
    ("none", 1): 10.0,  # a busy machine in round 1
    ("go", 1): 10.0,
    ("project", 1): 10.0,
}


def test_ratios_are_taken_within_each_round() -> None:
    base = [1.0 + i / 100 for i in range(100)]
    samples = [
        Sample(setup, kind, round_, [v * FACTOR[(setup, round_)] for v in base])
        for round_ in (0, 1)
        for setup in SETUPS
        for kind in ("cpu", "gpu")
    ]
    lines = {line.split("  ")[0].strip(): line for line in report(samples).splitlines()}
    # Round 0: 3 and 1.5; round 1: 1 and 1. Pooled over rounds, the slow round would hide it.
    assert "median ratio 2.00 (1.00 - 3.00)" in lines["cpu project/none"]
    assert "median ratio 1.25 (1.00 - 1.50)" in lines["gpu project/go"]
    assert "p99 ratio 1.25 (1.00 - 1.50)" in lines["gpu project/go"]
