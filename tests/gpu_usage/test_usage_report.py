"""`gpu-admission usage`'s arithmetic and words: the share a peak needs, the replicas that
allows per GPU model, a JAX pool that sizes nothing, GPU-hours at a minute's resolution, and a
Prometheus that cannot be reached."""

from __future__ import annotations

import pytest

from commands.parser import main as cli
from gpu_usage.usage_report import (
    GIB,
    MIB,
    checked_duration,
    hours_query,
    namespace_rows,
    needed_share,
    render_namespaces,
    render_workloads,
    workload_rows,
)
from tests.support.ports import free_port

H200, H100 = 150754820096, 85520809984  # bytes, as NVML gives them


def _workload(name: str, peak: float, pool: bool = False) -> tuple[dict, float]:
    labels = {
        "namespace": "team-a",
        "workload_kind": "Deployment",
        "workload": name,
        "gpu_model": "NVIDIA H200",
        "preallocated": "true" if pool else "false",
    }
    return labels, peak


def test_a_peak_needs_ten_percent_more_in_256_mib_steps() -> None:
    assert needed_share(6 * GIB) == 6912 * MIB  # 6.6 GiB, up to the next step
    assert needed_share(20 * GIB) == 22 * GIB
    assert needed_share(1) == 256 * MIB  # never less than one step


def test_replicas_per_model_and_the_share_now() -> None:
    peaks = [_workload("train", 6 * GIB), _workload("jax-eval", 17.5 * GIB, pool=True)]
    shares = [
        (
            {
                "namespace": "team-a",
                "workload_kind": "Deployment",
                "workload": "train",
                "gpu_model": "NVIDIA H200",
            },
            4 * GIB,
        )
    ]
    models = [({"gpu_model": "NVIDIA H200"}, H200), ({"gpu_model": "NVIDIA H100 80GB HBM3"}, H100)]
    rows = {r.workload: r for r in workload_rows(peaks, shares, models)}
    assert rows["train"].replicas == {"NVIDIA H200": 20, "NVIDIA H100 80GB HBM3": 11}
    assert rows["train"].share_bytes == 4 * GIB
    assert rows["jax-eval"].needed_bytes is None and rows["jax-eval"].replicas == {}
    table = render_workloads(list(rows.values()), "table").splitlines()
    assert table[0].split()[:3] == ["NAMESPACE", "WORKLOAD", "GPU"]
    train = next(line for line in table if "Deployment/train" in line)
    assert "6.0 GiB" in train and "4.0 GiB" in train and "6.8 GiB" in train
    assert "NVIDIA H200: 20" in train
    jax = next(line for line in table if "jax-eval" in line)
    assert "XLA_PYTHON_CLIENT_PREALLOCATE=false" in jax
    csv = render_workloads(list(rows.values()), "csv").splitlines()
    assert csv[0].startswith("namespace,workload_kind,workload,gpu_model,peak_bytes")
    assert any(line.endswith("NVIDIA H100 80GB HBM3=11;NVIDIA H200=20,false") for line in csv)


def test_gpu_hours_are_summed_at_a_minutes_resolution() -> None:
    assert hours_query("x", "30d") == "sum_over_time(x[30d:60s]) * 60 / 3600"
    assert hours_query("x", "2m") == "sum_over_time(x[2m:2s]) * 2 / 3600"  # short periods finer
    rows = namespace_rows([({"namespace": "team-a"}, 182.5)], [({"namespace": "team-b"}, 10 * GIB)])
    assert [(r.namespace, r.gpu_hours, r.gpu_memory_gib_hours) for r in rows] == [
        ("team-a", 182.5, 0.0),
        ("team-b", 0.0, 10.0),
    ]
    assert render_namespaces(rows, "csv").splitlines() == [
        "namespace,gpu_hours,gpu_memory_gib_hours",
        "team-a,182.5000,0.0000",
        "team-b,0.0000,10.0000",
    ]


@pytest.mark.parametrize("text", ["7d", "12h", "1h30m", "90s"])
def test_durations_as_prometheus_writes_them(text: str) -> None:
    assert checked_duration(text) == text


@pytest.mark.parametrize("text", ["7 days", "-1h", "0h", "h", ""])
def test_a_bad_duration_says_what_one_looks_like(text: str) -> None:
    with pytest.raises(ValueError, match=r"e\.g\. 7d, 12h, 1h30m"):
        checked_duration(text)


def test_an_unreachable_prometheus_is_one_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    assert cli(["usage", "--prometheus", url]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: cannot query Prometheus at {url}") and "--prometheus" in err


def test_a_bad_since_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(["usage", "--prometheus", "http://x", "--since", "a week"]) == 2
    assert "e.g. 7d" in capsys.readouterr().err
