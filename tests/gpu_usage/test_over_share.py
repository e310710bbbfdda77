"""Per container: processes summed, peaks since start, and the over-share judgement: past the
share and one CUDA context per process, once per rise, a JAX pool of its share never over."""

from __future__ import annotations

from dataclasses import replace

from gpu_usage.attribution import UsageRow
from gpu_usage.containers import ContainerUsage, Peaks, by_container
from gpu_usage.nvml_reader import Gpu
from gpu_usage.over_share import CONTEXT_ALLOWANCE_BYTES, OverShareWatch

GIB, MIB = 1024**3, 1024**2
GPU = Gpu("GPU-a", "NVIDIA H200", "0", 140 * GIB, 0)


def _row(pid: int, container_id: str, used: int, sm: float | None = 10.0, **kw: object) -> UsageRow:
    base = UsageRow(
        GPU,
        pid,
        "python",
        "team-a",
        f"pod-{container_id}",
        "main",
        used,
        sm,
        35 * GIB,
        False,
        container_id,
    )
    return replace(base, **kw)  # type: ignore[arg-type]


def _usage(container_id: str, used: int, pids: int = 1, **kw: object) -> ContainerUsage:
    base = ContainerUsage(
        "team-a",
        f"pod-{container_id}",
        "main",
        container_id,
        GPU,
        used,
        10.0,
        35 * GIB,
        False,
        pids=tuple(range(pids)),
    )
    return replace(base, **kw)  # type: ignore[arg-type]


def test_a_containers_processes_are_summed_per_gpu() -> None:
    rows = [
        _row(1, "c1", 10 * GIB, 30.0),
        _row(2, "c1", 5 * GIB, 80.0),  # a second worker
        _row(3, "c2", GIB, None),
        _row(4, "", GIB, pod="", namespace=""),  # outside any pod: not a container's
    ]
    usage = {u.container_id: u for u in by_container(rows)}
    assert set(usage) == {"c1", "c2"}
    assert (usage["c1"].used_bytes, usage["c1"].sm_percent, usage["c1"].pids) == (
        15 * GIB,
        100.0,
        (1, 2),  # SM time summed, capped at the whole GPU
    )
    assert usage["c2"].sm_percent is None


def test_the_peak_holds_until_the_container_ends() -> None:
    peaks = Peaks()
    assert peaks.update([_usage("c1", 8 * GIB)], {"c1"})[0].peak_bytes == 8 * GIB
    assert peaks.update([_usage("c1", 3 * GIB)], {"c1"})[0].peak_bytes == 8 * GIB
    assert peaks.update([], {"c1"}) == []  # idle, still running: the peak is kept
    assert peaks.update([_usage("c1", GIB)], {"c1"})[0].peak_bytes == 8 * GIB
    peaks.update([], set())  # ended
    assert peaks.update([_usage("c1", GIB)], {"c1"})[0].peak_bytes == GIB
    # A restarted container has a new ID: its peak starts again.
    assert peaks.update([_usage("c1-restarted", 2 * GIB)], None)[0].peak_bytes == 2 * GIB


def test_over_share_is_past_the_share_and_its_contexts_once_per_rise() -> None:
    watch = OverShareWatch()
    share = 35 * GIB
    inside = share + 772 * MIB  # PyTorch at its cap, with its context: not over
    assert watch.update([_usage("c1", inside)]) == []
    first = watch.update([_usage("c1", share + CONTEXT_ALLOWANCE_BYTES + GIB), _usage("c2", GIB)])
    assert [f.usage.container_id for f in first] == ["c1"]
    assert [n.container_id for n in first[0].neighbours] == ["c2"]
    message = first[0].message()
    assert "over its share of 35,840 MiB" in message and "team-a/pod-c2" in message
    assert watch.update([_usage("c1", share + 3 * GIB)]) == []  # still over: said already
    watch.update([_usage("c1", share - GIB)])  # back within its share
    assert len(watch.update([_usage("c1", share + 3 * GIB)])) == 1  # a new rise


def test_two_processes_get_two_contexts() -> None:
    watch = OverShareWatch()
    two = 35 * GIB + 2 * 772 * MIB
    assert watch.update([_usage("c1", two, pids=2)]) == []
    assert len(watch.update([_usage("c1", two, pids=1)])) == 1


def test_a_jax_pool_of_its_share_is_not_over() -> None:
    pool = _usage("jax", 35 * GIB + 500 * MIB, preallocated=True)
    assert OverShareWatch().update([pool]) == []


def test_a_container_without_a_share_is_never_over() -> None:
    whole = _usage("c1", 100 * GIB, share_bytes=None)
    assert OverShareWatch().update([whole]) == []


def test_one_process_of_unknown_memory_makes_the_containers_unknown() -> None:
    rows = [_row(1, "c1", 10 * GIB), _row(2, "c1", None)]  # type: ignore[arg-type]
    (usage,) = by_container(rows)
    assert usage.used_bytes is None and usage.pids == (1, 2)
    assert OverShareWatch().update([usage]) == []  # not judged
    assert Peaks().update([usage], {"c1"})[0].peak_bytes is None


def test_the_allowance_is_the_watchs_and_a_rise_outlives_a_sweep_without_process() -> None:
    watch = OverShareWatch(allowance=2 * GIB)
    assert watch.update([_usage("c1", 35 * GIB + 1536 * MIB)], {"c1"}) == []  # under 2 GiB
    (first,) = watch.update([_usage("c1", 38 * GIB)], {"c1"})
    assert first.rise == 0 and first.limit_bytes == 37 * GIB
    assert watch.update([], {"c1"}) == []  # between two workers, still running
    assert watch.update([_usage("c1", 38 * GIB)], {"c1"}) == []  # the same rise
    watch.update([_usage("c1", 30 * GIB)], {"c1"})
    (second,) = watch.update([_usage("c1", 38 * GIB)], {"c1"})
    assert second.rise == 1 and second.event_name() != first.event_name()
    watch.update([], set())  # ended: forgotten
    assert watch.update([_usage("c1", 38 * GIB)], {"c1"})[0].rise == 0
