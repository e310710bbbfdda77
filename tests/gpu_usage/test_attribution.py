"""Who uses what: NVML's processes joined with /proc and the node's pods into the node's table,
with each GPU's memory no process lists kept as a row of its own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpu_usage.attribution import UNLISTED, attribute
from gpu_usage.host_processes import ProcessTable
from gpu_usage.nvml_reader import NvmlReader, Sweep
from gpu_usage.pod_index import PodIndex
from gpu_usage.table import render
from tests.gpu_usage.fake_nvml import FakeGpu, FakeNvml

GIB, MIB = 1024**3, 1024**2
TRAIN_ID, JAX_ID = "a" * 64, "b" * 64
TRAIN_UID, JAX_UID = "00000000-0000-0000-0000-00000000000a", "00000000-0000-0000-0000-00000000000b"


def _proc(root: Path, pid: int, command: str, cgroup: str) -> None:
    (root / str(pid)).mkdir()
    (root / str(pid) / "cgroup").write_text(cgroup)
    (root / str(pid) / "comm").write_text(command + "\n")


def _pod(name: str, uid: str, container_id: str | None, env: list[dict[str, str]]) -> dict:
    status: dict[str, Any] = {}
    if container_id:
        status["containerStatuses"] = [
            {"name": "main", "containerID": f"containerd://{container_id}"}
        ]
    return {
        "metadata": {"namespace": "team-a", "name": name, "uid": uid},
        "spec": {"containers": [{"name": "main", "image": "x", "env": env}]},
        "status": status,
    }


def _world(tmp_path: Path) -> tuple[FakeNvml, ProcessTable, PodIndex]:
    _proc(tmp_path, 101, "python", f"0::/kubepods/burstable/pod{TRAIN_UID}/{TRAIN_ID}\n")
    _proc(tmp_path, 102, "python", f"0::/kubepods/besteffort/pod{JAX_UID}/{JAX_ID}\n")
    _proc(tmp_path, 103, "Xorg", "0::/system.slice/display-manager.service\n")
    gpu = FakeGpu(
        "GPU-a",
        processes={101: 5 * GIB, 102: 10 * GIB, 103: 100 * MIB, 104: GIB},  # 104 has ended
        sm={101: 40, 102: 10},
    )
    pods = PodIndex(
        [
            _pod("train", TRAIN_UID, TRAIN_ID, [{"name": "GPU_MEMORY_LIMIT_MIB", "value": "4096"}]),
            _pod(
                "jax",
                JAX_UID,
                JAX_ID,
                [
                    {"name": "GPU_MEMORY_LIMIT_MIB", "value": "10240"},
                    {"name": "XLA_PYTHON_CLIENT_MEM_FRACTION", "value": "0.125"},
                ],
            ),
        ]
    )
    return FakeNvml([gpu]), ProcessTable(tmp_path), pods


def _second(nvml: FakeNvml) -> Sweep:
    """A sweep with utilization: the first only opens the window (nvml_utilization.py)."""
    reader = NvmlReader(nvml)
    reader.sweep()
    return reader.sweep()


def test_each_process_is_named_by_its_pod_and_container(tmp_path: Path) -> None:
    nvml, table, pods = _world(tmp_path)
    sweep = _second(nvml)
    rows = attribute(sweep, {p.pid: table.lookup(p.pid) for p in sweep.processes}, pods)
    by_pid = {row.pid: row for row in rows}
    train = by_pid[101]
    assert (train.namespace, train.pod, train.container) == ("team-a", "train", "main")
    assert (train.used_bytes, train.sm_percent, train.share_bytes) == (5 * GIB, 40.0, 4 * GIB)
    assert not train.preallocated
    assert by_pid[102].preallocated  # a JAX pool: NVML shows the pool
    host = by_pid[103]
    assert (host.pod, host.command, host.sm_percent) == ("", "Xorg", 0.0)
    assert 104 not in by_pid  # ended between NVML and /proc
    # What the GPU uses beyond the listed processes (the driver's 512 MiB) is kept; the ended
    # process's memory was listed by NVML, so it is not counted again.
    assert by_pid[0].command == UNLISTED
    assert by_pid[0].used_bytes == 512 * MIB


def test_a_container_whose_status_lags_is_named_by_its_pod(tmp_path: Path) -> None:
    nvml, table, _ = _world(tmp_path)
    pods = PodIndex([_pod("train", TRAIN_UID, None, [])])  # no containerID yet
    sweep = NvmlReader(nvml).sweep()
    rows = attribute(sweep, {p.pid: table.lookup(p.pid) for p in sweep.processes}, pods)
    train = next(row for row in rows if row.pid == 101)
    assert (train.namespace, train.pod, train.container) == ("team-a", "train", "")


def test_without_the_api_a_pods_process_is_named_by_ids(tmp_path: Path) -> None:
    nvml, table, _ = _world(tmp_path)
    sweep = NvmlReader(nvml).sweep()
    rows = attribute(sweep, {p.pid: table.lookup(p.pid) for p in sweep.processes}, None)
    train = next(row for row in rows if row.pid == 101)
    assert (train.namespace, train.pod, train.container) == ("?", f"uid {TRAIN_UID}", "a" * 13)


def test_a_pids_cgroup_is_read_once_and_forgotten_when_it_leaves_the_gpu(tmp_path: Path) -> None:
    _, table, _ = _world(tmp_path)
    for _ in range(3):
        table.lookup(101)
    assert table.reads == 1
    table.keep_only({102})
    table.lookup(101)
    assert table.reads == 2


def test_the_table_shows_every_row_with_its_share(tmp_path: Path) -> None:
    nvml, table, pods = _world(tmp_path)
    sweep = _second(nvml)
    text = render(attribute(sweep, {p.pid: table.lookup(p.pid) for p in sweep.processes}, pods))
    lines = text.splitlines()
    assert lines[0].split() == [
        "PID",
        "NAMESPACE",
        "POD",
        "CONTAINER",
        "GPU",
        "MEMORY",
        "SM",
        "SHARE",
    ]
    jax, train, host, rest = lines[1:]
    assert jax.split()[:4] == ["102", "team-a", "jax", "main"]
    assert jax.endswith("10,240 MiB (JAX pool)")
    assert train.split()[-6:] == ["5,120", "MiB", "40%", "4,096", "MiB", "(125%)"]
    assert "(host) Xorg" in host
    assert UNLISTED in rest and "512 MiB" in rest
    assert render([]) == "no GPU process on this node"


def test_hundreds_of_processes_each_read_once(tmp_path: Path) -> None:
    """500 processes on 8 GPUs, a container each: every one is named, and a second sweep reads
    no /proc file again."""
    gpus = [FakeGpu(f"GPU-{g}") for g in range(8)]
    pods = []
    for index in range(500):
        uid, cid = f"00000000-0000-0000-0000-{index:012d}", f"{index:064x}"
        _proc(tmp_path, 10_000 + index, "python", f"0::/kubepods/besteffort/pod{uid}/{cid}\n")
        gpus[index % 8].processes[10_000 + index] = MIB * (index + 1)
        pods.append(_pod(f"p-{index}", uid, cid, []))
    reader, table, index = NvmlReader(FakeNvml(gpus)), ProcessTable(tmp_path), PodIndex(pods)
    for _ in range(2):
        sweep = reader.sweep()
        rows = attribute(sweep, {p.pid: table.lookup(p.pid) for p in sweep.processes}, index)
    named = {row.pod for row in rows if row.pid}
    assert named == {f"p-{i}" for i in range(500)}
    assert table.reads == 500


def test_an_mps_clients_share_of_the_gpu_is_unknown_not_zero(tmp_path: Path) -> None:
    """Its kernels run in the MPS server's context, whose PID carries the samples."""
    _proc(tmp_path, 101, "python", f"0::/kubepods/burstable/pod{TRAIN_UID}/{TRAIN_ID}\n")
    gpu = FakeGpu("GPU-a", mps_clients={101: GIB}, sm={999: 80})  # 999: the MPS server
    table, pods = ProcessTable(tmp_path), PodIndex([_pod("train", TRAIN_UID, TRAIN_ID, [])])
    sweep = NvmlReader(FakeNvml([gpu])).sweep()
    (row,) = [r for r in attribute(sweep, {101: table.lookup(101)}, pods) if r.pid]
    assert (row.pod, row.used_bytes, row.sm_percent) == ("train", GIB, None)
