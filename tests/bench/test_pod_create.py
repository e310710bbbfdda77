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


def test_a_variant_is_paired_with_the_project_round_by_round() -> None:
    base = [1.0 + i / 100 for i in range(100)]
    webhook = "webhook pods.mutate.gpu-admission.io"
    samples = []
    for round_ in (0, 1):
        for setup, factor, server_ms in (
            ("none", 1.0, 0.0),
            ("go", 2.0, 0.0),
            ("project", 4.0, 3.0),
            ("project-uvloop", 3.0, 2.0 + round_),  # 2/3, then 3/3 of the project's
        ):
            for kind in ("cpu", "gpu"):
                server = {f"{webhook} ms": server_ms, f"{webhook} calls/create": 1.0}
                if setup == "go":
                    server = {"webhook pods.mutate.go.bench ms": 1.0}
                latencies = [v * factor for v in base]
                samples.append(Sample(setup, kind, round_, latencies, server))
    lines = [line for line in report(samples).splitlines() if "uvloop/project" in line]
    assert lines == [
        "cpu project-uvloop/project  median ratio 0.75 (0.75 - 0.75)  p99 ratio 0.75 (0.75 - 0.75)",
        "cpu project-uvloop/project  API server's webhook ms ratio 0.83 (0.67 - 1.00)",
        "gpu project-uvloop/project  median ratio 0.75 (0.75 - 0.75)  p99 ratio 0.75 (0.75 - 0.75)",
        "gpu project-uvloop/project  API server's webhook ms ratio 0.83 (0.67 - 1.00)",
    ]
