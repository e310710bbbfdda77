"""A played kubelet: a node agent of the real kube-apiserver, beside the real kube-scheduler and
kube-controller-manager, through the real client.

    kubelet = FakeKubelet(api_client, pvc_base_dir=tmp_path / "pvcs")
    kubelet.start()          # registers its Node; returns once its watch has listed
    ...                      # create Jobs / Pods through the API; the scheduler binds them
    kubelet.pvc_dir("ml", "imagenet"), kubelet.logs("ml", pod_name, "main")
    kubelet.stop()           # kills running processes and stops the watch

It registers its Node (labels, allocatable, its log endpoint) and renews its Lease and Ready
condition, so kube-controller-manager's node lifecycle controller lifts the not-ready taint the
API server puts on every new Node. Every pod bound to it runs: each container's command as a
local process (see run.py), from the project's image where it can (image_run.py), init
containers first, then the others one after another. Their exit codes and termination messages
become container states and the pod phase (Succeeded/Failed; a `restartPolicy: Always` pod stays
Running), written over what the server holds. It serves `pods/log` over HTTPS at its InternalIP
(logs.py), and finishes a deleted pod's deletion (grace period 0, by uid) once its processes
are gone. Everything is driven by a watch on Pods (no polling).
"""

from __future__ import annotations

import datetime as dt
import json
import queue
import shutil
import ssl
import tempfile
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from tests.world.kubelet.env import ConfigError, build_env, command_line
from tests.world.kubelet.image_run import ImageContainerProcess, Images
from tests.world.kubelet.logs import KubeletLogServer
from tests.world.kubelet.run import (
    DEFAULT_TERMINATION_MESSAGE_PATH,
    ContainerProcess,
    MountPoints,
    Termination,
)
from tests.world.kubelet.volumes import apply_fs_group, container_mounts, prepare_volumes
from tests.world.kubelet.watch import Watcher

DEFAULT_NODE = "node-1"
HOST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SYNC_TIMEOUT_SECONDS = 10
NODE_ADDRESS = "127.0.0.1"  # the kubelet's log endpoint listens on loopback
# As the kubelet: its Lease in kube-node-lease and its Ready condition, renewed well within
# kube-controller-manager's --node-monitor-grace-period.
HEARTBEAT_SECONDS = 5.0
LEASE_SECONDS = 40
NODE_LEASE_NAMESPACE = "kube-node-lease"


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
    metadata = obj.get("metadata") or {}
    return metadata.get("namespace", ""), metadata.get("name", "")


def _condition(kind: str, status: str = "True", reason: str | None = None) -> dict[str, Any]:
    condition = {
        "type": kind,
        "status": status,
        "lastProbeTime": None,
        "lastTransitionTime": _now(),
    }
    if reason:
        condition["reason"] = reason
    return condition


class _ApiSources:
    """Secrets and ConfigMaps read through the API for env and volumes."""

    def __init__(self, core: client.CoreV1Api) -> None:
        self._core = core

    def _read(self, call: Any, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return json.loads(call(name, namespace, _preload_content=False).data)
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    def secret(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._read(self._core.read_namespaced_secret, namespace, name)

    def config_map(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._read(self._core.read_namespaced_config_map, namespace, name)

    def token(self, pod: Mapping[str, Any], audience: str | None, seconds: int) -> str:
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        body: dict[str, Any] = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "expirationSeconds": seconds,
                "boundObjectRef": {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": meta.get("name", ""),
                    "uid": meta.get("uid", ""),
                },
            },
        }
        if audience:
            body["spec"]["audiences"] = [audience]
        try:
            response = self._core.create_namespaced_service_account_token(
                spec.get("serviceAccountName") or "default",
                meta.get("namespace", ""),
                body,
                _preload_content=False,
            )
        except ApiException as error:
            raise ConfigError(f"failed to fetch token: {error.reason}") from error
        return str(json.loads(response.data)["status"]["token"])


class FakeKubelet:
    def __init__(
        self,
        api_client: client.ApiClient | None = None,
        *,
        kubeconfig: str | Path | None = None,
        pvc_base_dir: str | Path | None = None,
        node_name: str = DEFAULT_NODE,
        node_labels: Mapping[str, str] | None = None,
        volume_source: Callable[[str, str, Path], None] | None = None,
        images: Images | None = None,
    ) -> None:
        if api_client is None:
            if kubeconfig is None:
                raise ValueError("give an ApiClient or a kubeconfig path")
            api_client = config.new_client_from_config(str(kubeconfig))
        # Typed as Any: plain dicts go in and raw responses come out (_preload_content=False).
        self._core: Any = client.CoreV1Api(api_client)
        self._sources = _ApiSources(self._core)
        self._workdir = Path(tempfile.mkdtemp(prefix="fake-kubelet-"))
        self._pvc_base = Path(pvc_base_dir) if pvc_base_dir else self._workdir / "pvcs"
        self.node_name = node_name
        self._node_labels = dict(node_labels or {})
        # Fills a PVC's directory when it is first made (a provisioner restoring a snapshot).
        self._volume_source = volume_source
        self.images = images
        self._volume_lock = threading.Lock()
        self._queue: queue.Queue[tuple[str, str] | None] = queue.Queue()
        self._lock = threading.Lock()
        self._pods: dict[tuple[str, str], dict[str, Any]] = {}
        self._runners: dict[tuple[str, str], _PodRun] = {}
        self._started: set[str] = set()  # pod uids this kubelet has started
        self._mount_points = MountPoints()
        self._next_ip = 10
        self._watchers = [Watcher(self._core.list_pod_for_all_namespaces, self._on_pod, "pods")]
        self._worker = threading.Thread(target=self._work, name="kubelet-worker", daemon=True)
        self._stopping = threading.Event()
        self._heartbeat = threading.Thread(target=self._beat, name="kubelet-heartbeat", daemon=True)
        self._log_server = KubeletLogServer(self._log_path, _serving_context())

    # ------------------------------------------------------------------ lifecycle and queries
    def start(self) -> FakeKubelet:
        self._log_server.start()
        self._ensure_node()
        self._renew()
        self._heartbeat.start()
        self._worker.start()
        for watcher in self._watchers:
            watcher.start()
        for watcher in self._watchers:
            if not watcher.synced.wait(SYNC_TIMEOUT_SECONDS):
                raise TimeoutError("the kubelet's watches did not list within 10 s")
        return self

    def stop(self) -> None:
        self._stopping.set()
        for watcher in self._watchers:
            watcher.stop()
        self._queue.put(None)
        if self._worker.is_alive():
            self._worker.join(timeout=10)
        with self._lock:
            runs = list(self._runners.values())
        for run in runs:
            run.kill()
        for run in runs:
            run.join()
        self._log_server.stop()
        shutil.rmtree(self._workdir, ignore_errors=True)

    def __enter__(self) -> FakeKubelet:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def pvc_dir(self, namespace: str, claim: str) -> Path:
        """The host directory holding PersistentVolumeClaim ``namespace/claim``'s data."""
        directory = self._pvc_base / namespace / claim
        with self._volume_lock:
            if not directory.exists():
                directory.mkdir(parents=True)
                if self._volume_source is not None:
                    self._volume_source(namespace, claim, directory)
        return directory

    def logs(self, namespace: str, pod: str, container: str) -> str:
        path = self._log_path(namespace, pod, container)
        return path.read_text(errors="replace") if path.exists() else ""

    def _log_path(self, namespace: str, pod: str, container: str) -> Path:
        return self._workdir / "logs" / namespace / pod / f"{container}.log"

    # ------------------------------------------------------------------ watch handlers
    def _on_pod(self, event: str, pod: dict[str, Any]) -> None:
        key = _key(pod)
        with self._lock:
            if event == "DELETED":
                self._pods.pop(key, None)
            else:
                self._pods[key] = pod
        self._queue.put(key)

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            try:
                self._sync_pod(item)
            except ApiException as error:
                if error.status in (404, 409):
                    continue  # gone or changed meanwhile: a newer event follows
                raise

    # ------------------------------------------------------------------ the node
    def _ensure_node(self) -> None:
        labels = {
            "kubernetes.io/hostname": self.node_name,
            "kubernetes.io/os": "linux",
            **self._node_labels,
        }
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": self.node_name, "labels": labels},
        }
        try:
            self._core.create_node(node, _preload_content=False)
        except ApiException as error:
            if error.status != 409:
                raise
        status = {
            "conditions": [_condition("Ready", reason="KubeletReady")],
            "addresses": [
                {"type": "InternalIP", "address": NODE_ADDRESS},
                {"type": "Hostname", "address": self.node_name},
            ],
            # Where the API server finds this kubelet for pods/log (kubelet_logs).
            "daemonEndpoints": {"kubeletEndpoint": {"Port": self._log_server.port}},
            "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
            "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"},
        }
        self._core.patch_node_status(
            self.node_name,
            [{"op": "add", "path": "/status", "value": status}],
            _preload_content=False,
        )

    def _beat(self) -> None:
        while not self._stopping.wait(HEARTBEAT_SECONDS):
            try:
                self._renew()
            except ApiException:
                continue  # the API server away for a moment: the next beat tries again

    def _renew(self) -> None:
        """The Node's Lease and Ready condition, as the kubelet renews them."""
        now = _now()
        # A MicroTime: the client writes a datetime in ISO form, its fraction only when nonzero,
        # and the API server wants one.
        moment = dt.datetime.now(dt.UTC)
        micro = moment if moment.microsecond else moment.replace(microsecond=1)
        coordination = client.CoordinationV1Api(self._core.api_client)
        lease = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.node_name, "namespace": NODE_LEASE_NAMESPACE},
            "spec": {
                "holderIdentity": self.node_name,
                "leaseDurationSeconds": LEASE_SECONDS,
                "renewTime": micro,
            },
        }
        try:
            coordination.patch_namespaced_lease(
                self.node_name,
                NODE_LEASE_NAMESPACE,
                {"spec": lease["spec"]},
                _content_type="application/merge-patch+json",
            )
        except ApiException as error:
            if error.status != 404:
                raise
            coordination.create_namespaced_lease(NODE_LEASE_NAMESPACE, lease)
        ready = {**_condition("Ready", reason="KubeletReady"), "lastHeartbeatTime": now}
        # Strategic merge: conditions merge by type, as the kubelet's status update keeps them.
        self._core.patch_node_status(
            self.node_name,
            {"status": {"conditions": [ready]}},
            _content_type="application/strategic-merge-patch+json",
            _preload_content=False,
        )

    def _sync_pod(self, key: tuple[str, str]) -> None:
        with self._lock:
            pod = self._pods.get(key)
            run = self._runners.get(key)
        if pod is None or (pod.get("metadata") or {}).get("deletionTimestamp"):
            if run is not None:
                run.kill()
            if pod is not None and self._runs_here(pod):
                if run is not None:
                    run.join()
                self._finish_deletion(pod)
            return
        status = pod.get("status") or {}
        uid = (pod.get("metadata") or {}).get("uid", "")
        if status.get("phase") in ("Succeeded", "Failed") or run is not None:
            return
        with self._lock:
            if uid in self._started:
                return
        if self._runs_here(pod):  # kube-scheduler binds it; the binding's event brings it here
            self._start_pod(key, pod)

    def _runs_here(self, pod: Mapping[str, Any]) -> bool:
        return bool((pod.get("spec") or {}).get("nodeName") == self.node_name)

    def _finish_deletion(self, pod: Mapping[str, Any]) -> None:
        """The kubelet's last word on a deleted pod: its processes are gone, so the API server
        may drop it now (grace period 0, for this uid only)."""
        meta = pod.get("metadata") or {}
        body = {"gracePeriodSeconds": 0, "preconditions": {"uid": meta.get("uid")}}
        self._core.delete_namespaced_pod(
            meta.get("name"), meta.get("namespace"), body=body, _preload_content=False
        )

    def _start_pod(self, key: tuple[str, str], pod: dict[str, Any]) -> None:
        with self._lock:
            self._started.add(pod["metadata"].get("uid", ""))
            self._next_ip += 1
            pod_ip = f"10.244.0.{self._next_ip}"
        pod.setdefault("status", {})["podIP"] = pod_ip
        containers = pod["spec"].get("containers") or []
        now = _now()
        status = {
            "phase": "Running",
            "conditions": [
                _condition("PodReadyToStartContainers"),
                _condition("Initialized"),
                _condition("Ready"),
                _condition("ContainersReady"),
                _condition("PodScheduled"),
            ],
            "hostIP": NODE_ADDRESS,
            "podIP": pod_ip,
            "podIPs": [{"ip": pod_ip}],
            "startTime": now,
            "containerStatuses": [
                _container_status(c, {"running": {"startedAt": now}}) for c in containers
            ],
        }
        self._write_pod_status(key, status)
        run = _PodRun(self, key, pod, status)
        with self._lock:
            self._runners[key] = run
        run.start()

    def _write_pod_status(self, key: tuple[str, str], status: dict[str, Any]) -> None:
        # Over what the API server holds (its qosClass, the scheduler's condition): the kubelet
        # writes the fields it owns.
        with self._lock:
            held = dict(((self._pods.get(key) or {}).get("status")) or {})
        self._core.patch_namespaced_pod_status(
            key[1],
            key[0],
            [{"op": "add", "path": "/status", "value": {**held, **status}}],
            _preload_content=False,
        )

    def _run_finished(self, key: tuple[str, str]) -> None:
        with self._lock:
            self._runners.pop(key, None)


def _serving_context() -> ssl.SSLContext:
    """A serving certificate for 127.0.0.1, as a kubelet's self-signed one."""
    from certs.issue import ServingSpec, issue_bundle
    from certs.reloader import CertReloader

    reloader = CertReloader()
    reloader.reload(issue_bundle(ServingSpec("kubelet", "node", ips=[NODE_ADDRESS])))
    return reloader.context


def _container_status(container: Mapping[str, Any], state: dict[str, Any]) -> dict[str, Any]:
    running = "running" in state
    return {
        "name": container["name"],
        "image": container.get("image", ""),
        "imageID": "",
        "containerID": "",
        "ready": running,
        "started": running,
        "restartCount": 0,
        "state": state,
        "lastState": {},
    }


def _terminated(result: Termination, started: str) -> dict[str, Any]:
    terminated: dict[str, Any] = {
        "exitCode": result.exit_code,
        "reason": result.reason,
        "startedAt": started,
        "finishedAt": _now(),
    }
    if result.message:
        terminated["message"] = result.message
    return {"terminated": terminated}


class _PodRun:
    """Runs one pod's containers on a thread and reports their states."""

    def __init__(
        self, kubelet: FakeKubelet, key: tuple[str, str], pod: dict[str, Any], status: dict
    ) -> None:
        self._kubelet = kubelet
        self._key = key
        self._pod = pod
        self._status = status
        self._killed = threading.Event()
        self._current: ContainerProcess | ImageContainerProcess | None = None
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=f"pod-{key[1]}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def kill(self) -> None:
        self._killed.set()
        with self._lock:
            current = self._current
        if current is not None:
            current.kill()

    def join(self) -> None:
        self._thread.join(timeout=10)

    def _run(self) -> None:
        try:
            self._run_containers()
        finally:
            self._kubelet._run_finished(self._key)

    def _run_containers(self) -> None:
        kubelet, pod = self._kubelet, self._pod
        pod_dir = kubelet._workdir / "pods" / self._key[0] / self._key[1]
        spec = pod["spec"]
        try:
            volumes = prepare_volumes(pod, pod_dir, kubelet.pvc_dir, kubelet._sources)
        except ConfigError as error:
            self._waiting_all("CreateContainerConfigError", str(error))
            return
        fs_group = (spec.get("securityContext") or {}).get("fsGroup")
        if fs_group is not None and self._from_image(spec):
            apply_fs_group(volumes, fs_group)
        init, main = spec.get("initContainers") or [], spec.get("containers") or []
        init_statuses: list[dict[str, Any]] = []
        exit_codes: list[int] = []
        for index, container in enumerate([*init, *main]):
            if self._killed.is_set():
                return
            result, started = self._run_one(container, volumes, pod_dir)
            if result is None:
                return
            state = _terminated(result, started)
            if index < len(init):
                init_statuses.append(_container_status(container, state))
                self._status["initContainerStatuses"] = init_statuses
                if result.exit_code != 0:
                    self._finish("Failed")
                    return
            else:
                self._status["containerStatuses"][index - len(init)] = _container_status(
                    container, state
                )
                exit_codes.append(result.exit_code)
            self._write()
        if spec.get("restartPolicy", "Always") == "Always":
            return  # would be restarted forever; the pod stays Running
        self._finish("Succeeded" if all(code == 0 for code in exit_codes) else "Failed")

    def _run_one(
        self, container: Mapping[str, Any], volumes: dict, pod_dir: Path
    ) -> tuple[Termination | None, str]:
        kubelet, pod = self._kubelet, self._pod
        started = _now()
        images = kubelet.images if self._from_image(pod["spec"]) else None
        try:
            # From an image, PATH and HOSTNAME are the image's and the runtime's.
            env = {} if images else {"PATH": HOST_PATH, "HOSTNAME": self._key[1]}
            env.update(build_env(pod, container, kubelet._sources))
            argv = [] if images else command_line(container, env)
        except ConfigError as error:
            self._waiting_all("CreateContainerConfigError", str(error))
            return None, started
        log_path = kubelet._log_path(self._key[0], self._key[1], container["name"])
        log_path.parent.mkdir(parents=True, exist_ok=True)
        termination_file = pod_dir / "termination" / container["name"]
        termination_file.parent.mkdir(parents=True, exist_ok=True)
        process: ContainerProcess | ImageContainerProcess
        if images is not None:
            process = ImageContainerProcess(images.engine, images.image)
        else:
            process = ContainerProcess(kubelet._mount_points)
        with self._lock:
            self._current = process
        if self._killed.is_set():
            return None, started
        if isinstance(process, ImageContainerProcess):
            result = process.run(
                pod,
                container,
                env,
                container_mounts(container, volumes),
                termination_file,
                container.get("terminationMessagePath") or DEFAULT_TERMINATION_MESSAGE_PATH,
                container.get("terminationMessagePolicy") == "FallbackToLogsOnError",
                log_path,
            )
            return (None if self._killed.is_set() else result), started
        result = process.run(
            argv,
            env,
            container_mounts(container, volumes),
            container.get("workingDir"),
            termination_file,
            container.get("terminationMessagePath") or DEFAULT_TERMINATION_MESSAGE_PATH,
            container.get("terminationMessagePolicy") == "FallbackToLogsOnError",
            log_path,
        )
        if self._killed.is_set():
            return None, started
        return result, started

    def _from_image(self, spec: Mapping[str, Any]) -> bool:
        """Every container of the pod runs from an image this node has."""
        images = self._kubelet.images
        containers = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
        return images is not None and all(images.runs(c.get("image", "")) for c in containers)

    def _waiting_all(self, reason: str, message: str) -> None:
        waiting = {"waiting": {"reason": reason, "message": message}}
        self._status["containerStatuses"] = [
            _container_status(c, waiting) for c in self._pod["spec"].get("containers") or []
        ]
        self._status["phase"] = "Pending"
        self._write()

    def _finish(self, phase: str) -> None:
        self._status["phase"] = phase
        for condition in self._status["conditions"]:
            if condition["type"] in ("Ready", "ContainersReady"):
                condition.update(status="False", reason="PodCompleted")
        self._write()

    def _write(self) -> None:
        try:
            self._kubelet._write_pod_status(self._key, self._status)
        except ApiException as error:
            if error.status != 404:
                raise
