"""The API server's side of the agent when it fails: the node's pods listed and an Event written
through the real kubernetes client and urllib3, against a local server that refuses, answers
500, cuts an answer off or answers what is not JSON. Neither call's failure leaves NodePods, and
the agent's loop goes on with its NVML series."""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from kubernetes import client
from urllib3.exceptions import MaxRetryError, ProtocolError

from gpu_admission.process.metrics import Metrics
from gpu_usage.node_pods import MAX_AGE_SECONDS, NodePods
from gpu_usage.usage_metrics import AgentMetrics
from tests.gpu_usage.test_agent import _agent, _run, _samples, _train_pod, _until

GIB = 1024**3
NODE = "gpu-node-1"


class ApiServer:
    """Answers the agent's two calls, the listing as `listing` says and the Event as `events`:
    "ok" (the pods; an Event made), "500", "cut" (an answer whose body ends before its
    Content-Length: urllib3's ProtocolError), "not json" or "stall" (no answer until `close()`,
    longer than the client waits); `close()` leaves the port refusing (urllib3's MaxRetryError
    once its retries are spent)."""

    def __init__(self, pods: list[dict]) -> None:
        self.listing = self.events = "ok"
        self.pods = pods
        self._closed = False
        self.released = threading.Event()  # ends every "stall"
        self.stalled = 0  # calls that met a stall
        served = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = json.dumps({"kind": "PodList", "items": served.pods})
                self._answer(served.listing, 200, body)

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                self._answer(served.events, 201, json.dumps({"kind": "Event"}))

            def _answer(self, mode: str, status: int, body: str) -> None:
                if mode == "stall":
                    served.stalled += 1
                    served.released.wait(60)  # until the test ends: past the client's timeout
                data = body.encode()
                if mode == "500":
                    status, data = 500, b'{"kind": "Status", "code": 500}'
                elif mode == "not json":
                    data = b"<html>a proxy's page</html>"
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if mode == "cut":
                    data = data[: len(data) // 2]
                    self.close_connection = True
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def close(self) -> None:
        self.released.set()
        if self._closed:
            return
        self._closed = True
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


@pytest.fixture
def server() -> Iterator[ApiServer]:
    served = ApiServer([_train_pod()])
    try:
        yield served
    finally:
        served.close()


def _node_pods(url: str) -> NodePods:
    """NodePods through the real client, listing again at each refresh (its clock a minute on
    at each reading)."""
    api = client.ApiClient(client.Configuration(host=url))
    return NodePods(api, NODE, clock=itertools.count(0.0, MAX_AGE_SECONDS).__next__)


@pytest.mark.parametrize("mode", ["refused", "500", "cut", "not json"])
def test_a_failed_listing_keeps_the_last_pods_and_says_why(server: ApiServer, mode: str) -> None:
    pods = _node_pods(server.url)
    pods.refresh(unknown=False)
    assert pods.error == "" and pods.index.uid_of("team-a", "train-7d9f8-x2x4q")
    if mode == "refused":
        server.close()
    else:
        server.listing = mode
    pods.refresh(unknown=False)
    assert pods.error.startswith(f"cannot list the pods of node {NODE}")
    assert pods.index.uid_of("team-a", "train-7d9f8-x2x4q")  # the last listing stands


@pytest.mark.parametrize("mode", ["refused", "500", "cut"])
def test_a_failed_event_is_not_written_and_raises_nothing(server: ApiServer, mode: str) -> None:
    pods = _node_pods(server.url)
    event = (("team-a", "train-7d9f8-x2x4q"), "GPUMemoryOverShare", "over", "gpu-node-1")
    assert pods.event(*event, name="train.1") is True
    if mode == "refused":
        server.close()
    else:
        server.events = mode
    assert pods.event(*event, name="train.2") is False


def test_the_client_raises_what_is_not_an_oserror(server: ApiServer) -> None:
    """Why NodePods catches urllib3's errors: the client lets them through, and they are not
    OSErrors (the API errors caught before)."""
    api = client.ApiClient(client.Configuration(host=server.url))
    request = api.param_serialize("GET", "/api/v1/pods", header_params={}, auth_settings=[])
    server.listing = "cut"
    with pytest.raises(ProtocolError) as cut:
        api.call_api(*request, _request_timeout=5).read()
    server.close()
    with pytest.raises(MaxRetryError) as refused:
        api.call_api(*request, _request_timeout=5)
    assert not isinstance(cut.value, OSError) and not isinstance(refused.value, OSError)


def test_the_agent_sweeps_on_through_the_api_servers_failures(
    tmp_path: Path, server: ApiServer
) -> None:
    """The Event of a container over its share cannot be written (its answer cut off), then
    the listing is cut off, then the API server goes (refused): the loop goes on sweeping,
    ready, the last listing naming the container, its NVML series intact."""
    agent, _, _ = _agent(tmp_path, 6 * GIB)  # 4 GiB share + 1 GiB allowance: over it
    pods = agent.pods = _node_pods(server.url)
    metrics = Metrics(process_metrics=False)
    agent.metrics = AgentMetrics(metrics)
    server.events = "cut"

    def counted(family: str, label: str, value: str) -> float:
        return sum(
            s.value
            for s in _samples(metrics)[family]
            if s.name.endswith(("_total", "_count")) and s.labels.get(label) == value
        )

    def sweeps() -> float:
        return counted("gpu_admission_gpu_usage_sweep_seconds", "part", "nvml")

    def series() -> list[tuple[str, float]]:
        used = _samples(metrics)["container_accelerator_memory_used_bytes"]
        return [(s.labels["pod"], s.value) for s in used]

    async def steps() -> None:
        failed = ("gpu_admission_gpu_usage_over_share_events", "result", "failed")
        await _until(lambda: counted(*failed) >= 1, "the Event not written")
        for cut_off, words in (("cut", "Connection broken"), ("refused", "Max retries")):
            if cut_off == "refused":
                server.close()
            else:
                server.listing = cut_off
            await _until(lambda w=words: w in pods.error, f"the listing {cut_off}")
            after = sweeps()
            await _until(lambda n=after: sweeps() >= n + 2, "two sweeps after it")
            assert series() == [("train-7d9f8-x2x4q", 6 * GIB)], cut_off
            assert agent.unavailable == "" and agent.readiness() == []
            assert _samples(metrics)["gpu_admission_gpu_usage_nvml_up"][0].value == 1

    _run(agent, 0.01, steps)


def test_an_api_server_that_stalls_holds_neither_the_sweeps_nor_their_series(
    tmp_path: Path, server: ApiServer
) -> None:
    """The listing and the Event hang (an API server stalled for longer than the client's 30 s
    timeout): they wait on their own tasks, and the sweeps go on meanwhile, ready, the last
    listing naming the container."""
    agent, _, _ = _agent(tmp_path, 6 * GIB)  # over its share: an Event to write
    agent.pods = _node_pods(server.url)
    metrics = Metrics(process_metrics=False)
    agent.metrics = AgentMetrics(metrics)
    server.events = "stall"  # the over-share Event, at the first sweep

    def sweeps() -> float:
        return sum(
            s.value
            for s in _samples(metrics)["gpu_admission_gpu_usage_sweep_seconds"]
            if s.name.endswith("_count") and s.labels.get("part") == "nvml"
        )

    async def steps() -> None:
        await _until(lambda: _samples(metrics)["container_accelerator_memory_used_bytes"], "a")
        server.listing = "stall"
        await _until(lambda: server.stalled >= 2, "the listing and the Event stalled")
        after = sweeps()
        await _until(lambda: sweeps() >= after + 5, "five sweeps during the stall")
        used = _samples(metrics)["container_accelerator_memory_used_bytes"]
        assert [(s.labels["pod"], s.value) for s in used] == [("train-7d9f8-x2x4q", 6 * GIB)]
        assert agent.readiness() == [] and agent.liveness() == []
        server.released.set()  # the stalled calls answer, and their threads end with the loop

    _run(agent, 0.01, steps)
