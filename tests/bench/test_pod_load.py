"""The pod-load benchmark's report: ratios taken within each round, the API server's webhook time
summed over the webhooks it called, failures shown with the first one's words, and the sweep's
crossing of the p99 limit."""

from __future__ import annotations

from bench.pod_load import Load, crossings, report


def _load(
    setup: str, round_: int, per_second: float, p99: float, clients: int = 16, **extra: object
) -> Load:
    return Load(
        setup=setup,
        kind="gpu",
        round=round_,
        clients=clients,
        created=int(per_second * 60),
        failed=0,
        per_second=per_second,
        latency_ms={"p50": p99 / 3, "p99": p99},
        cpu_ms={"apiserver": 1000.0 / per_second, "etcd": 0.5, "webhook": 0.4, "client": 0.2},
        **extra,  # type: ignore[arg-type]
    )


def _line(lines: list[str], start: str) -> str:
    return next(line for line in lines if line.startswith(start))


def test_ratios_are_taken_within_each_round() -> None:
    loads = [
        _load("none", 0, 900, 40),
        _load("go", 0, 500, 60),
        _load("project", 0, 400, 90),  # 0.8 of the pair's creates in round 0
        _load("none", 1, 300, 120),  # a busy machine in round 1
        _load("go", 1, 200, 150),
        _load("project", 1, 200, 150),  # 1.0 in round 1
    ]
    lines = report(loads)
    assert "creates/s ratio 0.90 (0.80 - 1.00)" in _line(lines, "gpu project/go")
    assert "p99 ratio 1.25 (1.00 - 1.50)" in _line(lines, "gpu project/go")
    # 1/400 against 1/500 and 1/200 against 1/200 of a second per pod.
    assert "API server CPU/pod ratio 1.12 (1.00 - 1.25)" in _line(lines, "gpu project/go")
    assert not any(line.startswith("gpu project-2/") for line in lines)  # not measured


def test_the_api_servers_webhook_time_sums_its_calls() -> None:
    server = {
        "webhook pods.mutate.go.bench ms": 1.5,
        "webhook pods.mutate.go.bench calls/create": 2.0,  # reinvoked
        "webhook pods.validate.go.bench ms": 1.0,
        "webhook pods.validate.go.bench calls/create": 1.0,
        "plugin MutatingAdmissionWebhook ms": 9.0,  # a plugin's figure is not a webhook's
    }
    lines = report([_load("go", 0, 500, 60, server=server)])
    assert "API server's webhook time 4.00 (4.00 - 4.00) ms" in _line(lines, "gpu go")


def test_failures_are_counted_and_the_first_is_shown() -> None:
    failing = _load("project", 0, 400, 90, first_failure='500 {"message": "webhook timed out"}')
    failing.failed = 3
    line = _line(report([failing]), "gpu project")
    assert line.endswith('failed 3: 500 {"message": "webhook timed out"}')


def test_the_sweep_names_the_first_load_past_the_limit() -> None:
    sweep = [
        _load("go", 0, 500, 40, clients=16),
        _load("go", 0, 600, 99, clients=32),
        _load("go", 0, 620, 140, clients=64),
        _load("project", 0, 400, 120, clients=16),
        _load("project-2", 0, 450, 70, clients=16),
        _load("project-2", 0, 460, 95, clients=32),
    ]
    lines = crossings(sweep, 100.0)
    assert _line(lines, "go ").startswith("go        passed at 64 clients")
    assert _line(lines, "project ").startswith("project   passed at 16 clients")
    assert _line(lines, "project-2").startswith("project-2 not passed up to 32 clients")
    assert "none" not in "".join(lines[2:])  # a set-up not swept is not shown


def test_a_variant_is_reported_and_paired_with_the_project_round_by_round() -> None:
    variant = "project-coarse-pod-policy"
    loads = [
        _load("project", 0, 400, 90),
        _load(variant, 0, 200, 90),  # half the project's rate in round 0
        _load("project", 1, 100, 90),  # a busy machine in round 1
        _load(variant, 1, 100, 90),
    ]
    lines = report(loads)
    assert _line(lines, f"gpu {variant} creates/s")
    assert "creates/s ratio 0.75 (0.50 - 1.00)" in _line(lines, f"gpu {variant}/project")
