"""Whether the GPU Operator's driver manager is taking the driver off this node: read from the
node's labels, watched on a thread of its own so the API server's troubles never reach NVML.

The agent holds NVML for its life, as dcgm-exporter and the device plugin do: a module held open
does not unload. NVIDIA's k8s-driver-manager (cmd/driver-manager/main.go, v0.12.0) asks GPU
clients off a node before it unloads the driver by setting every `nvidia.com/gpu.deploy.<component>`
label it manages to `paused-for-driver-upgrade` in one patch (`maybeSetPaused`: "true" becomes
`paused-for-driver-upgrade`, another value gets `_paused-for-driver-upgrade` appended), waits for
the operator's pods to go, unloads, and sets them back (`maybeSetTrue`). Its shell version before
v0.9 did the same with `kubectl label`. So any `nvidia.com/gpu.deploy.*` label holding that word
means "let go of the driver": the agent shuts NVML down and sweeps again once none does (a new
driver then ends the process, whose library is the old one: gpu_usage/nvml_reader.py).

The watch starts from a list (`fieldSelector=metadata.name=<node>`) and is resumed from the last
resourceVersion; a failure is said once, retried on a back-off, and leaves the last known state:
an API server that cannot be reached never releases NVML, nor holds it against a pause it saw.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator, Mapping
from typing import Any

from kubernetes import client

from gpu_admission.process.quiet_log import QuietLog
from gpu_usage.node_pods import API_ERRORS, call, stream

log = logging.getLogger("gpu_admission.gpu_usage")

DEPLOY_LABEL_PREFIX = "nvidia.com/gpu.deploy."
PAUSED = "paused-for-driver-upgrade"
WATCH_SECONDS = 300  # the server ends each watch after this; it is resumed
READ_TIMEOUT_SECONDS = WATCH_SECONDS + 30  # a watch silent past its own end is dead
FIRST_RETRY_SECONDS = 1.0
MAX_RETRY_SECONDS = 30.0


def paused_by(labels: Mapping[str, str]) -> str | None:
    """The first `nvidia.com/gpu.deploy.*` label that says the driver manager paused its
    clients, as `key=value`; None while none does."""
    for key in sorted(labels):
        if key.startswith(DEPLOY_LABEL_PREFIX) and PAUSED in labels[key]:
            return f"{key}={labels[key]}"
    return None


class Expired(Exception):
    """The watch's resourceVersion is too old (410 Gone): list again."""


class DriverPause:
    """The node's driver-manager state, kept current by `run` on its own thread."""

    def __init__(self, api: client.ApiClient, node: str) -> None:
        self._api = api
        self._node = node
        self.paused: str | None = None  # the label that says so, while the driver is going
        self.synced = threading.Event()  # the node's labels have been read once
        self._stop = threading.Event()
        self._quiet = QuietLog(log)
        self._thread: threading.Thread | None = None
        self._delay = FIRST_RETRY_SECONDS  # back to it whenever the API server answers

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name="driver-pause", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def run(self) -> None:
        version: str | None = None
        while not self._stop.is_set():
            try:
                if version is None:
                    version = self._list()
                for event in self._watch(version):
                    version = self._seen(event) or version
            except Expired:
                version = None
            except (*API_ERRORS, ValueError) as error:  # ValueError: an answer not JSON
                self._quiet.failed(
                    "node-labels",
                    f"cannot watch node {self._node}'s labels (the driver manager's pause): "
                    f"{error}; retrying, NVML {'released' if self.paused else 'held'} meanwhile",
                )
                self._stop.wait(self._delay)  # back-off between attempts
                self._delay = min(2 * self._delay, MAX_RETRY_SECONDS)
            else:
                self._quiet.recovered("node-labels", f"watching node {self._node}'s labels again")

    def _list(self) -> str:
        answer = call(
            self._api,
            "GET",
            "/api/v1/nodes",
            [("fieldSelector", f"metadata.name={self._node}")],
            timeout=30.0,
        )
        listed = json.loads(answer)
        self._delay = FIRST_RETRY_SECONDS
        for node in listed.get("items") or []:
            self._labels(node)
        self.synced.set()
        return str(listed["metadata"]["resourceVersion"])

    def _watch(self, version: str) -> Iterator[dict[str, Any]]:
        query = [
            ("fieldSelector", f"metadata.name={self._node}"),
            ("watch", "true"),
            ("resourceVersion", version),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(WATCH_SECONDS)),
        ]
        lines = stream(self._api, "/api/v1/nodes", query, READ_TIMEOUT_SECONDS)
        self._delay = FIRST_RETRY_SECONDS
        for line in lines:
            if self._stop.is_set():
                return
            if line.strip():
                yield json.loads(line)

    def _seen(self, event: dict[str, Any]) -> str | None:
        kind, node = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            if node.get("code") == 410:
                raise Expired()
            raise ValueError(f"the watch answered {node.get('message') or node}")
        if kind in ("ADDED", "MODIFIED"):
            self._labels(node)
        return (node.get("metadata") or {}).get("resourceVersion")

    def _labels(self, node: dict[str, Any]) -> None:
        paused = paused_by((node.get("metadata") or {}).get("labels") or {})
        if paused != self.paused:
            if paused:
                log.warning(
                    "the GPU Operator's driver manager is taking the driver off node %s (%s): "
                    "releasing NVML until it is done",
                    self._node,
                    paused,
                )
            else:
                log.info("the driver manager is done on node %s: reading NVML again", self._node)
        self.paused = paused
