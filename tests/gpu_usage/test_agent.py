"""The agent's sweep into metrics under the kubelet's old names and labels, its readiness
without NVML, nothing stale served after a failed or hung sweep, its exit on a driver change,
its wait (no exit) on a driver whose module and library disagree from the start, and
`gpu-usage --once` on this machine's real /proc."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterable
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from commands.parser import main as cli
from gpu_admission.config.model import GpuConfig
from gpu_admission.config.schedulers import KAI_SCHEDULER
from gpu_admission.process.metrics import Metrics
from gpu_usage.agent import Agent
from gpu_usage.host_processes import ProcessTable
from gpu_usage.nvml_faults import DriverChanged
from gpu_usage.nvml_reader import NvmlReader
from gpu_usage.usage_metrics import AgentMetrics
from tests import ROOT
from tests.gpu_usage.fake_nvml import FakeGpu, FakeNvml
from tests.support.ports import free_port
from tests.support.waits import while_running

GIB = 1024**3
UID = "00000000-0000-0000-0000-00000000000a"
CID = "c" * 64


class StaticPods:
    """The node's pods as NodePods gives them, without an API server."""

    def __init__(self, pods: list[dict], gpu: GpuConfig | None = None) -> None:
        from gpu_usage.pod_index import PodIndex

        self.index = PodIndex(pods, gpu)
        self.error = ""
        self.events: list[tuple[tuple[str, str], str, str]] = []
        self.event_names: list[str | None] = []
        self.models: list[str] = []

    def know_gpus(self, models: Iterable[str]) -> None:
        self.models = list(models)

    def refresh(self, unknown: bool) -> None:
        pass

    def event(
        self,
        pod: tuple[str, str],
        reason: str,
        message: str,
        instance: str,
        name: str | None = None,
    ) -> bool:
        self.events.append((pod, reason, message))
        self.event_names.append(name)
        return True


def _samples(metrics: Metrics) -> dict[str, list]:
    text = metrics.exposition().decode()
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def _train_pod() -> dict:
    """A Deployment's pod on a quarter of a shared GPU with a 4 GiB share, its container
    started (CID), as the API server lists it."""
    return {
        "metadata": {
            "namespace": "team-a",
            "name": "train-7d9f8-x2x4q",
            "uid": UID,
            "labels": {"pod-template-hash": "7d9f8"},
            "ownerReferences": [{"kind": "ReplicaSet", "name": "train-7d9f8", "controller": True}],
        },
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "resources": {"limits": {"nvidia.com/gpu.shared": "1"}},
                    "env": [
                        {"name": "GPU_MEMORY_LIMIT_MIB", "value": "4096"},
                        {"name": "GPU_SHARED_REPLICAS", "value": "4"},
                    ],
                }
            ]
        },
        "status": {
            "phase": "Running",
            "containerStatuses": [{"name": "main", "containerID": f"containerd://{CID}"}],
        },
    }


def _agent(tmp_path: Path, used: int) -> tuple[Agent, StaticPods, FakeGpu]:
    (tmp_path / "7").mkdir()
    (tmp_path / "7" / "cgroup").write_text(f"0::/kubepods/burstable/pod{UID}/{CID}\n")
    (tmp_path / "7" / "comm").write_text("python\n")
    pods = StaticPods([_train_pod()])
    gpu = FakeGpu("GPU-a", name="NVIDIA H200", processes={7: used}, sm={7: 60})
    agent = Agent(NvmlReader(FakeNvml([gpu])), ProcessTable(tmp_path), pods)  # type: ignore[arg-type]
    return agent, pods, gpu


def test_a_sweep_shows_under_the_kubelets_old_names(tmp_path: Path) -> None:
    agent, _, _ = _agent(tmp_path, 3 * GIB)
    metrics = Metrics(process_metrics=False)
    agent.metrics = AgentMetrics(metrics)
    agent.record(agent.sweep())
    assert _samples(metrics)["gpu_admission_container_gpu_duty_cycle"] == []  # first window
    agent.record(agent.sweep())
    samples = _samples(metrics)
    labels = {
        "namespace": "team-a",
        "pod": "train-7d9f8-x2x4q",
        "container": "main",
        "gpu_uuid": "GPU-a",
        "gpu_model": "NVIDIA H200",
    }
    # The kubelet's own labels (cAdvisor's accelerator collector) beside them.
    kubelet = {"make": "nvidia", "model": "NVIDIA H200", "acc_id": "GPU-a"}
    used = samples["container_accelerator_memory_used_bytes"][0]
    workload = {"workload_kind": "Deployment", "workload": "train"}
    assert used.labels == {**labels, **kubelet, "preallocated": "false", **workload}
    assert used.value == 3 * GIB
    total = samples["container_accelerator_memory_total_bytes"][0]
    assert total.labels == {**labels, **kubelet} and total.value == 80 * GIB
    duty = samples["gpu_admission_container_gpu_duty_cycle"][0]
    assert duty.labels == {**labels, **kubelet, **workload} and duty.value == 60
    # The same, as seconds kept busy: a counter, which rate() reads whatever it scrapes.
    busy = samples["gpu_admission_container_gpu_busy_seconds"]
    assert [(s.name, s.labels) for s in busy] == [
        ("gpu_admission_container_gpu_busy_seconds_total", duty.labels)
    ]
    assert busy[0].value >= 0
    # Alone on a whole GPU: the kubelet's meaning (the GPU's own figure) under its old name.
    whole = samples["container_accelerator_duty_cycle"][0]
    assert whole.labels == duty.labels and whole.value == 60
    gpu = samples["gpu_admission_gpu_duty_cycle"][0]
    assert gpu.labels == {"gpu_uuid": "GPU-a", "gpu_model": "NVIDIA H200"} and gpu.value == 60
    assert samples["gpu_admission_container_gpu_memory_share_bytes"][0].value == 4 * GIB
    assert samples["gpu_admission_container_gpu_memory_peak_bytes"][0].value == 3 * GIB
    held = samples["gpu_admission_container_gpus_held"][0]
    assert held.labels["workload"] == "train" and held.value == 0.25  # one of four replicas
    outside = samples["gpu_admission_gpu_memory_outside_pods_bytes"][0]
    assert outside.labels["command"] == "(not listed by a process)"  # the driver's reserve
    assert samples["gpu_admission_gpu_usage_nvml_up"][0].value == 1


def test_containers_sharing_a_gpu_each_get_their_own_duty_and_not_the_whole_gpus(
    tmp_path: Path,
) -> None:
    """Two containers on one GPU: each its processes' figure, capped at the GPU's own (samples
    taken at their own moments may add up past it); no series under the kubelet's name, whose
    whole-GPU meaning would give each the other's time too."""
    agent = _kai_agent(tmp_path)
    gpu = agent.reader.nvml.gpus[0]
    metrics = Metrics(process_metrics=False)
    agent.metrics = AgentMetrics(metrics)
    for _ in range(2):
        agent.record(agent.sweep())
    duty = {
        s.labels["pod"]: s.value
        for s in _samples(metrics)["gpu_admission_container_gpu_duty_cycle"]
    }
    assert duty == {"train-a": 40.0, "train-b": 20.0}
    assert _samples(metrics)["container_accelerator_duty_cycle"] == []
    gpu.busy = 30  # the GPU says it was busy less than either process's sample
    agent.record(agent.sweep())
    duty = {
        s.labels["pod"]: s.value
        for s in _samples(metrics)["gpu_admission_container_gpu_duty_cycle"]
    }
    assert duty == {"train-a": 30.0, "train-b": 20.0}
    assert [s.value for s in _samples(metrics)["gpu_admission_gpu_duty_cycle"]] == [30.0]


def test_garbage_utilization_samples_are_counted(tmp_path: Path) -> None:
    agent, _, gpu = _agent(tmp_path, 3 * GIB)
    gpu.garbage = {7}
    metrics = Metrics(process_metrics=False)
    agent.metrics = AgentMetrics(metrics)
    for _ in range(3):
        agent.record(agent.sweep())
    samples = _samples(metrics)
    assert samples["gpu_admission_container_gpu_duty_cycle"] == []  # dropped: unknown, not 100
    [counted] = samples["gpu_admission_gpu_usage_nvml_garbage_samples"]
    assert counted.value == 3  # one a sweep, the first window's too


def test_over_its_share_writes_one_event_per_rise(tmp_path: Path) -> None:
    agent, pods, gpu = _agent(tmp_path, 6 * GIB)  # share 4 GiB + 1 GiB context allowance
    metrics = Metrics(process_metrics=False)
    agent.metrics = AgentMetrics(metrics)
    agent.record(agent.sweep())
    agent.record(agent.sweep())
    (over,) = _samples(metrics)["gpu_admission_container_gpu_memory_over_share_bytes"]
    assert over.value == GIB and over.labels["container"] == "main"
    gpu.processes[7] = 3 * GIB  # back within its share: no series, the alert resolves
    agent.record(agent.sweep())
    assert _samples(metrics)["gpu_admission_container_gpu_memory_over_share_bytes"] == []
    assert [s.value for s in _samples(metrics)["gpu_admission_gpu_memory_total_bytes"]] == [
        80 * GIB
    ]
    assert [(pod, reason) for pod, reason, _ in pods.events] == [
        (("team-a", "train-7d9f8-x2x4q"), "GPUMemoryOverShare")
    ]
    assert (
        "uses 6,144 MiB of GPU 0 (NVIDIA H200, GPU-a), over its share of 4,096 MiB"
        in (pods.events[0][2])
    )


def test_without_nvml_it_is_not_ready_with_the_reason_and_keeps_trying(tmp_path: Path) -> None:
    agent, _, _ = _agent(tmp_path, GIB)
    nvml = agent.reader.nvml
    nvml.init_error = 12
    metrics = Metrics(process_metrics=False)
    agent.metrics = AgentMetrics(metrics)

    async def two_tries() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(agent.run(0.1, stop))
        while "libnvidia-ml" not in agent.unavailable:  # the first sweep's answer
            await asyncio.sleep(0.01)
        assert "libnvidia-ml.so.1" in agent.readiness()[0]
        nvml.init_error = None  # the driver arrives
        while agent.unavailable:
            await asyncio.sleep(0.01)
        stop.set()
        await task

    asyncio.run(asyncio.wait_for(two_tries(), 30))
    assert agent.readiness() == []
    assert _samples(metrics)["gpu_admission_gpu_usage_nvml_up"][0].value == 1


async def _until(condition: object, what: str) -> None:
    """Wait for `condition()` (the agent's loop runs meanwhile)."""
    for _ in range(3000):
        if condition():  # type: ignore[operator]
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{what}: not within 30 s")


def _run(agent: Agent, interval: float, steps: object) -> None:
    """The agent's loop, while `steps` (an async function) acts and waits on it."""

    async def both() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(agent.run(interval, stop))
        try:
            await steps()  # type: ignore[operator]
        finally:
            stop.set()
            await asyncio.wait_for(task, 30)

    asyncio.run(both())


def test_a_failed_sweep_takes_every_container_series_away(tmp_path: Path) -> None:
    agent, _, _ = _agent(tmp_path, 3 * GIB)
    nvml = agent.reader.nvml
    metrics = Metrics(process_metrics=False)
    agent.metrics = AgentMetrics(metrics)

    async def steps() -> None:
        await _until(lambda: _samples(metrics)["container_accelerator_memory_used_bytes"], "a")
        nvml.lose_driver = True
        await _until(lambda: agent.unavailable, "the failed sweep")
        samples = _samples(metrics)
        for family in ("memory_used_bytes", "duty_cycle", "memory_total_bytes"):
            assert samples[f"container_accelerator_{family}"] == [], family
        assert samples["gpu_admission_container_gpus_held"] == []
        assert samples["gpu_admission_gpu_usage_nvml_up"][0].value == 0

    _run(agent, 0.05, steps)


class HangingNvml(FakeNvml):
    """NVML whose device count blocks while `hang` is set, as on a GPU fallen off the bus."""

    def __init__(self, gpus: list[FakeGpu]) -> None:
        super().__init__(gpus)
        self.hang = threading.Event()
        self.release = threading.Event()

    def nvmlDeviceGetCount(self) -> int:
        if self.hang.is_set():
            self.release.wait(30)
        return super().nvmlDeviceGetCount()


def test_a_hung_sweep_fails_liveness_and_serves_nothing_stale(tmp_path: Path) -> None:
    agent, _, gpu = _agent(tmp_path, 3 * GIB)
    nvml = HangingNvml([gpu])
    agent.reader = NvmlReader(nvml)
    agent.min_hang_seconds = 0.3
    metrics = Metrics(process_metrics=False)
    agent.metrics = AgentMetrics(metrics)

    async def steps() -> None:
        await _until(lambda: _samples(metrics)["container_accelerator_duty_cycle"], "a sweep")
        assert agent.liveness() == []
        nvml.hang.set()
        await _until(lambda: agent.liveness() and agent.unavailable, "liveness failing")
        assert "hangs" in agent.liveness()[0] and "hangs" in agent.readiness()[0]
        assert _samples(metrics)["container_accelerator_memory_used_bytes"] == []
        nvml.hang.clear()
        nvml.release.set()  # the call returns after all: the same sweep is taken
        await _until(lambda: not agent.unavailable, "the sweep returned")
        assert agent.liveness() == []

    _run(agent, 0.01, steps)


def test_a_driver_change_ends_the_loop_with_nothing_shown(tmp_path: Path) -> None:
    agent, _, _ = _agent(tmp_path, 3 * GIB)
    agent.reader.release_between_sweeps = True
    nvml = agent.reader.nvml
    metrics = Metrics(process_metrics=False)
    agent.metrics = AgentMetrics(metrics)
    agent.record(agent.sweep())
    assert nvml.initialised is False  # released between sweeps: no device file held
    nvml.init_error = 18  # LIB_RM_VERSION_MISMATCH: the driver was upgraded under us

    async def loop() -> None:
        await agent.run(0.01, asyncio.Event())

    with pytest.raises(DriverChanged):
        asyncio.run(asyncio.wait_for(loop(), 30))
    assert _samples(metrics)["container_accelerator_memory_used_bytes"] == []


class UpgradedAfterOneSweep(FakeNvml):
    """NVML that answers one sweep, then LIB_RM_VERSION_MISMATCH: the driver upgraded and its
    module reloaded under the running agent."""

    def nvmlShutdown(self) -> None:
        super().nvmlShutdown()
        self.init_error = 18


def test_the_command_exits_on_a_driver_change_for_the_kubelet_to_restart_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", UpgradedAfterOneSweep([FakeGpu("GPU-a")]))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    args = ["gpu-usage", "--metrics-port", str(free_port()), "--log-format", "text"]
    # Released after each sweep, the next init meets the new driver (held, the driver
    # manager's pause releases it first: test_driver_pause.py).
    assert cli([*args, "--interval", "0.1", "--release-nvml"]) == 3


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


MISMATCH_WORDS = "kernel module and its library"


def test_a_mismatch_from_the_start_waits_not_ready_and_alive(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Driver packages upgraded without a module reload: a restart would meet the same, so the
    loop goes on, not ready with one log line, live, trying init again on its back-off; a
    module reload is picked up without a restart."""
    agent, _, gpu = _agent(tmp_path, 3 * GIB)
    nvml = FakeNvml([gpu])
    nvml.init_error = 18  # LIB_RM_VERSION_MISMATCH at the first init
    clock = Clock()
    agent.reader = NvmlReader(nvml, release_between_sweeps=True, clock=clock)
    metrics = Metrics(process_metrics=False)
    agent.metrics = AgentMetrics(metrics)

    async def steps() -> None:
        await _until(lambda: MISMATCH_WORDS in agent.unavailable, "the mismatch said")
        for attempts, wait in ((2, 30), (3, 60)):  # its back-off's next two tries
            clock.now += wait
            await _until(lambda n=attempts: nvml.init_attempts == n, f"init try {attempts}")
        assert MISMATCH_WORDS in agent.readiness()[0] and "Reboot" in agent.readiness()[0]
        assert agent.liveness() == []
        assert _samples(metrics)["gpu_admission_gpu_usage_nvml_up"][0].value == 0
        said = [r for r in caplog.records if MISMATCH_WORDS in r.getMessage()]
        assert [r.levelno for r in said] == [logging.ERROR]  # once, however often tried
        nvml.init_error = None  # the module reloaded to the library's version
        clock.now += 120
        await _until(lambda: not agent.unavailable, "NVML answering")
        await _until(
            lambda: _samples(metrics)["container_accelerator_memory_used_bytes"], "the series"
        )

    _run(agent, 0.01, steps)


def _probe(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:  # 503: an answer, not a failure to connect
        return error.code, json.loads(error.read())


def test_the_command_serves_its_probes_through_a_mismatch_from_the_start(tmp_path: Path) -> None:
    """The command itself, with NVML played from a file (nvml_shim): no exit, no crash loop;
    /healthz answers 200, /readyz 503 with the reason, until it is stopped."""
    shim = Path(__file__).parent / "nvml_shim"
    state = tmp_path / "nvml.json"
    state.write_text(json.dumps({"init_error": 18, "gpus": [{"uuid": "GPU-a"}]}))
    port = free_port()
    env = {key: value for key, value in os.environ.items() if key != "KUBERNETES_SERVICE_HOST"}
    env |= {
        "PYTHONPATH": os.pathsep.join(map(str, (shim, shim.parent, ROOT))),
        "GPU_USAGE_FAKE_NVML": str(state),
    }
    log = tmp_path / "agent.log"
    command = [sys.executable, "-m", "commands", "gpu-usage", "--metrics-port", str(port)]
    command += ["--interval", "0.1", "--log-format", "text", "--proc", str(tmp_path)]
    agent = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT
    )
    try:
        ready = while_running(
            lambda: (
                (answer := _probe(f"http://127.0.0.1:{port}/readyz"))[0] == 503
                and MISMATCH_WORDS in str(answer[1])
                and answer
            ),
            "not ready for the mismatch",
            {"agent": agent},
            60,
            log,
        )
        assert "Reboot the node" in ready[1]["waiting_for"][0]
        assert _probe(f"http://127.0.0.1:{port}/healthz") == (200, {"status": "ok"})
        assert agent.poll() is None
    finally:
        agent.terminate()
        agent.wait(timeout=30)
    assert agent.returncode == 0
    assert log.read_text().count(MISMATCH_WORDS) == 1


def test_a_utilization_error_keeps_the_gpus_memory_series(tmp_path: Path) -> None:
    agent, _, gpu = _agent(tmp_path, 3 * GIB)
    gpu.faults["nvmlDeviceGetProcessUtilization"] = 999  # UNKNOWN
    metrics = Metrics(process_metrics=False)
    agent.metrics = AgentMetrics(metrics)
    agent.record(agent.sweep())
    samples = _samples(metrics)
    used = samples["container_accelerator_memory_used_bytes"]
    assert [(s.labels["pod"], s.value) for s in used] == [("train-7d9f8-x2x4q", 3 * GIB)]
    assert samples["gpu_admission_container_gpu_memory_peak_bytes"][0].value == 3 * GIB
    assert samples["container_accelerator_duty_cycle"] == []  # unknown, not 0
    (fault,) = samples["gpu_admission_gpu_usage_gpu_fault"]
    assert fault.labels == {"gpu": "GPU-a", "reason": "nvml_error", "figure": "utilization"}
    assert samples["gpu_admission_gpu_usage_nvml_up"][0].value == 1


def test_the_over_share_event_keeps_its_name_across_a_restart(tmp_path: Path) -> None:
    first, pods, gpu = _agent(tmp_path, 6 * GIB)
    first.record(first.sweep())
    restarted = Agent(NvmlReader(FakeNvml([gpu])), ProcessTable(tmp_path), pods)  # type: ignore[arg-type]
    restarted.record(restarted.sweep())
    assert len(pods.event_names) == 2 and pods.event_names[0] == pods.event_names[1]
    assert pods.event_names[0] and pods.event_names[0].startswith("train-7d9f8-x2x4q.")
    # Between two workers the container has no process: the same rise, no new Event.
    processes = dict(gpu.processes)
    gpu.processes.clear()
    restarted.record(restarted.sweep())
    gpu.processes.update(processes)
    restarted.record(restarted.sweep())
    assert len(pods.events) == 2


def test_one_lost_gpu_is_that_gpus_and_said(tmp_path: Path) -> None:
    agent, _, gpu = _agent(tmp_path, 3 * GIB)
    lost = FakeGpu("GPU-b", faults={"nvmlDeviceGetHandleByIndex": 15})
    agent.reader = NvmlReader(FakeNvml([gpu, lost]))
    metrics = Metrics(process_metrics=False)
    agent.metrics = AgentMetrics(metrics)
    agent.record(agent.sweep())
    samples = _samples(metrics)
    assert [s.labels["gpu_uuid"] for s in samples["container_accelerator_memory_used_bytes"]] == [
        "GPU-a"
    ]
    (fault,) = samples["gpu_admission_gpu_usage_gpu_fault"]
    assert fault.labels == {"gpu": "GPU 1", "reason": "gpu_lost", "figure": "all"}
    assert samples["gpu_admission_gpu_usage_nvml_up"][0].value == 1


def test_memory_nvml_cannot_tell_is_absent_not_zero(tmp_path: Path) -> None:
    agent, pods, gpu = _agent(tmp_path, 6 * GIB)
    gpu.processes[7] = None  # NVML: "not available"
    metrics = Metrics(process_metrics=False)
    agent.metrics = AgentMetrics(metrics)
    agent.record(agent.sweep())
    agent.record(agent.sweep())
    samples = _samples(metrics)
    assert samples["container_accelerator_memory_used_bytes"] == []
    assert samples["gpu_admission_container_gpu_memory_peak_bytes"] == []
    assert samples["gpu_admission_container_gpu_duty_cycle"][0].value == 60  # the rest is known
    assert pods.events == []  # not judged


def test_a_container_the_listing_does_not_name_yet_waits_for_it(tmp_path: Path) -> None:
    agent, _, gpu = _agent(tmp_path, 3 * GIB)
    (tmp_path / "8").mkdir()
    other = "d" * 64
    (tmp_path / "8" / "cgroup").write_text(f"0::/kubepods/pod{UID.replace('a', 'b')}/{other}\n")
    (tmp_path / "8" / "comm").write_text("python\n")
    gpu.processes[8] = GIB
    metrics = Metrics(process_metrics=False)
    agent.metrics = AgentMetrics(metrics)
    agent.record(agent.sweep())
    samples = _samples(metrics)
    assert [s.labels["pod"] for s in samples["container_accelerator_memory_used_bytes"]] == [
        "train-7d9f8-x2x4q"
    ]
    places = {s.labels["place"]: s.value for s in samples["gpu_admission_gpu_usage_processes"]}
    assert places == {"pod": 1, "unnamed": 1, "host": 0}


def _kai_agent(tmp_path: Path, gpu_config: GpuConfig | None = None) -> Agent:
    """A node whose one GPU KAI shares in halves (test_workloads._kai_node): each pod's
    container started, a process in each fraction and one in the reservation pod."""
    from tests.gpu_usage.test_workloads import _kai_node

    pods = _kai_node()
    processes = {}
    for pid, pod in enumerate(pods, start=21):
        uid, cid = f"00000000-0000-0000-0000-0000000000{pid}", str(pid) * 32
        pod["metadata"]["uid"] = uid
        container = pod["spec"]["containers"][0]["name"]
        pod["status"]["containerStatuses"] = [
            {"name": container, "containerID": f"containerd://{cid}"}
        ]
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "cgroup").write_text(f"0::/kubepods/pod{uid}/{cid}\n")
        (tmp_path / str(pid) / "comm").write_text(f"{container}\n")
        processes[pid] = 256 * 1024**2 if pid == 21 else 3 * GIB
    gpu = FakeGpu("GPU-a", name="NVIDIA H200", processes=processes, sm={22: 40, 23: 20})
    return Agent(
        NvmlReader(FakeNvml([gpu])),
        ProcessTable(tmp_path),
        StaticPods(pods, gpu_config),  # type: ignore[arg-type]
    )


def test_a_gpu_kai_shares_in_fractions_is_held_once(tmp_path: Path) -> None:
    """The reservation pod holds the GPU for the two halves: the node holds 1 GPU, all of it
    team-a's, and what NVML lists for the reservation pod is no tenant's use."""
    agent = _kai_agent(tmp_path)
    metrics = Metrics(process_metrics=False)
    agent.metrics = AgentMetrics(metrics)
    agent.record(agent.sweep())
    samples = _samples(metrics)
    held = samples["gpu_admission_container_gpus_held"]
    assert sum(s.value for s in held) == pytest.approx(1.0)
    assert {(s.labels["pod"], s.value) for s in held} == {("train-a", 0.5), ("train-b", 0.5)}
    used = samples["container_accelerator_memory_used_bytes"]
    assert {s.labels["pod"] for s in used} == {"train-a", "train-b"}
    outside = {
        s.labels["command"]: s.value for s in samples["gpu_admission_gpu_memory_outside_pods_bytes"]
    }
    assert outside["resource-reservation"] == 256 * 1024**2  # kept: the GPU's rows add up


def test_without_a_reservation_namespace_the_reservation_pod_counts(tmp_path: Path) -> None:
    kai = KAI_SCHEDULER.model_copy(update={"reservation_namespace": None})
    agent = _kai_agent(tmp_path, GpuConfig(schedulers=[kai]))
    metrics = Metrics(process_metrics=False)
    agent.metrics = AgentMetrics(metrics)
    agent.record(agent.sweep())
    samples = _samples(metrics)
    held = samples["gpu_admission_container_gpus_held"]
    assert sum(s.value for s in held) == pytest.approx(2.0)
    used = samples["container_accelerator_memory_used_bytes"]
    assert "gpu-reservation-3f9a1c2e7b5d4a60" in {s.labels["pod"] for s in used}


def test_once_prints_this_machines_processes_as_host_processes(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Outside a pod, no kubeconfig: the real /proc, this test's own PID on a fake GPU."""
    fake = FakeNvml([FakeGpu("GPU-a", name="NVIDIA H100 80GB HBM3", processes={os.getpid(): GIB})])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert cli(["gpu-usage", "--once"]) == 0
    out, err = capsys.readouterr()
    assert "named by pod UID" in err
    line = next(line for line in out.splitlines() if line.startswith(str(os.getpid())))
    assert "(host) " in line and "1,024 MiB" in line


def test_once_without_a_driver_says_so_and_fails(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = FakeNvml([])
    fake.init_error = 12
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert cli(["gpu-usage", "--once"]) == 1
    assert "this node has no NVIDIA driver" in capsys.readouterr().err
