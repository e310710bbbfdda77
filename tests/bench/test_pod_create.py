"""The pod-create benchmark's report: per-round ratios of the project's set-up to each baseline,
over the same round, never across rounds."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from bench.pod_create import SETUPS, Sample, answered_as, report

# (setup, round) -> how much slower than round 0's no-admission creates.
FACTOR = {
    ("none", 0): 1.0,
    ("go", 0): 2.0,
    ("go-h2", 0): 1.5,
    ("project", 0): 3.0,
    ("none", 1): 10.0,  # a busy machine in round 1
    ("go", 1): 10.0,
    ("go-h2", 1): 10.0,
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
    # HTTP/2's gain is a line of its own, never the project's baseline.
    assert "median ratio 0.88 (0.75 - 1.00)" in lines["gpu go-h2/go"]
    assert "median ratio 1.50 (1.00 - 2.00)" in lines["gpu project/go-h2"]


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


class _Peer:
    """A Go peer's review count, as `GoPeerConnections.reviews` reads it."""

    def __init__(self) -> None:
        self.count = 0

    def reviews(self) -> int:
        return self.count


class _Api:
    """Dry-run creates answered as the API server would with `calls` Go peers registered: each
    called peer counts a review and writes the pair's env."""

    def __init__(self, peers: dict[str, _Peer], calls: list[str]) -> None:
        self.peers, self.calls = peers, calls

    def create_pod(self, body: dict[str, Any], dry_run: bool) -> tuple[int, Any]:
        made = copy.deepcopy(body)
        for name in self.calls:
            self.peers[name].count += 1
        if self.calls:
            env = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}]
            if "resources" in made["spec"]["containers"][0]:
                env = [{"name": "GPU_REPLICAS", "value": "4"}]
            made["spec"]["containers"][0]["env"] = env
        return 201, made


@pytest.mark.parametrize(
    ("calls", "go", "go_h2"),
    [
        (["go"], True, False),
        (["go-h2"], False, True),
        (["go", "go-h2"], False, False),  # the set-up before not yet dropped
        ([], False, False),
    ],
)
def test_the_go_pairs_are_told_apart_by_which_one_answers(
    calls: list[str], go: bool, go_h2: bool
) -> None:
    peers = {"go": _Peer(), "go-h2": _Peer()}
    api = _Api(peers, calls)
    assert answered_as(api, "go", peers) is go  # type: ignore[arg-type]
    assert answered_as(api, "go-h2", peers) is go_h2  # type: ignore[arg-type]
