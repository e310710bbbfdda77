"""A rolling restart under load loses no admission: two `serve` replicas behind a balancer that
plays kube-proxy, a real kube-apiserver 1.36 calling the webhooks through it, eight writers
creating pods the whole time, and each replica replaced twice as `kubectl rollout restart`
does: a new replica joins when ready, the old one gets SIGTERM, its endpoint leaves the balancer
after a propagation delay (1 s, or 3 s), it drains and exits. Once with a certificate rotation in
the middle. Every create must succeed. (Without the drain, 15 of 1,372 creates failed here.)

Pods are created with a server-side dry run: the API server runs the whole admission chain,
webhooks included (they declare no side effects), and stores nothing.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes import config as kube_config

from certs.issue import ServingSpec, issue_serving
from certs.reloader import CertPaths
from commands.serve import AdmissionServer
from gpu_admission.cluster.view import StaticClusterView
from gpu_admission.config.model import Config
from gpu_admission.process.metrics import Metrics
from tests.real_api.balancer import Balancer
from tests.real_api.conftest import namespace_ready
from tests.support.ports import free_port
from tests.support.waits import while_running
from tests.world.control_plane import ControlPlane
from tests.world.harness import body, manifest_objects, with_ca_bundle

NAMESPACE = "rollout"
WRITERS = 8
WAIT = 60.0


class Replica:
    """One `serve` process's AdmissionServer, on its own thread and loop."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.server = AdmissionServer(
            config,
            None,
            metrics=Metrics(process_metrics=False),
            extra_services=[],
            cluster=(StaticClusterView(), None),
        )
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    @property
    def port(self) -> int:
        return self.config.server.port

    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.server.start(), self._loop).result(WAIT)

    def ready(self) -> bool:
        return self.server.readiness() == []

    def terminate(self) -> Future[None]:
        """SIGTERM: what `serve` runs on the signal."""
        return asyncio.run_coroutine_threadsafe(self.server.stop(), self._loop)

    def rotate(self, directory: Path) -> None:
        """A new serving certificate from the same CA, loaded as the reloader loads a change."""
        ca = self.config.certs.cert_dir
        assert ca is not None
        cert, key = issue_serving(
            (Path(ca) / "ca.crt").read_bytes(),
            (Path(ca) / "ca.key").read_bytes(),
            ServingSpec(
                self.config.certs.service_name, self.config.certs.namespace, ips=["127.0.0.1"]
            ),
        )
        (directory / "tls.crt").write_bytes(cert)
        (directory / "tls.key").write_bytes(key)
        paths = CertPaths(directory / "tls.crt", directory / "tls.key")
        assert self.server.certificates.reloader.reload(paths)

    def join(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(WAIT)


def replica_config(cert_dir: Path, drain_seconds: float) -> Config:
    return Config.model_validate(
        {
            "server": {
                "host": "127.0.0.1",
                "port": free_port(),
                "metrics_port": 0,
                "drain_seconds": drain_seconds,
                "shutdown_grace_seconds": 10,
            },
            "certs": {"cert_dir": str(cert_dir), "extra_ips": ["127.0.0.1"]},
        }
    )


class Writers:
    """Threads creating pods until told to stop; every failure is kept with its message."""

    def __init__(self, kubeconfig: Path) -> None:
        self.kubeconfig = kubeconfig
        self.created = 0
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._write, args=(i,)) for i in range(WRITERS)]

    def __enter__(self) -> Writers:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(WAIT)

    def _write(self, index: int) -> None:
        api = kube_config.new_client_from_config(str(self.kubeconfig))
        core = client.CoreV1Api(api)
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"generateName": f"writer-{index}-"},
            "spec": {"containers": [{"name": "app", "image": "nvidia/cuda:12.4.1-base"}]},
        }
        while not self._stop.is_set():
            try:
                made = core.create_namespaced_pod(NAMESPACE, pod, dry_run="All")
                env = {e.name: e.value for e in made.spec.containers[0].env or []}
                assert env.get("NVIDIA_VISIBLE_DEVICES") == "none", "not mutated"
                with self._lock:
                    self.created += 1
            except Exception as error:  # every failure is the finding
                with self._lock:
                    self.failures.append(str(error)[:300])
        api.close()


@pytest.fixture(scope="module")
def cluster(real_cluster: ControlPlane, api: client.ApiClient) -> Iterator[ControlPlane]:
    namespace_ready(api, NAMESPACE)
    yield real_cluster


def _register(api: client.ApiClient, balancer_port: int, ca_pem: bytes) -> None:
    registration = client.AdmissionregistrationV1Api(api)
    for kind, create, delete in (
        (
            "MutatingWebhookConfiguration",
            registration.create_mutating_webhook_configuration,
            registration.delete_mutating_webhook_configuration,
        ),
        (
            "ValidatingWebhookConfiguration",
            registration.create_validating_webhook_configuration,
            registration.delete_validating_webhook_configuration,
        ),
    ):
        (configuration,) = manifest_objects(kind)
        for webhook in configuration["webhooks"]:
            path = webhook["clientConfig"].pop("service")["path"]
            webhook["clientConfig"]["url"] = f"https://127.0.0.1:{balancer_port}{path}"
        try:
            delete(configuration["metadata"]["name"])
        except client.ApiException as error:
            if error.status != 404:
                raise
        create(body(with_ca_bundle(configuration, ca_pem)))


def _unregister(api: client.ApiClient) -> None:
    """No webhook may outlive its service: later tests would fail closed on it."""
    registration = client.AdmissionregistrationV1Api(api)
    for kind, delete in (
        ("MutatingWebhookConfiguration", registration.delete_mutating_webhook_configuration),
        ("ValidatingWebhookConfiguration", registration.delete_validating_webhook_configuration),
    ):
        (configuration,) = manifest_objects(kind)
        delete(configuration["metadata"]["name"])


def _replace(balancer: Balancer, old: Replica, new: Replica, propagation: float) -> None:
    """As the Deployment's rolling update does it (maxSurge 0): the old pod gets SIGTERM, its
    endpoint leaves the proxies `propagation` seconds later, a new pod joins once ready."""
    stopping = old.terminate()
    time.sleep(propagation)  # the scenario: endpoint removal reaches the proxy this late
    balancer.remove(old.port)
    new.start()
    while_running(new.ready, "the new replica to be ready", {}, WAIT)
    balancer.add(new.port)
    stopping.result(WAIT)
    old.join()


@pytest.mark.parametrize(
    ("propagation", "rotate"),
    [(1.0, False), (3.0, False), (1.0, True)],
    ids=["1s", "3s", "1s-with-rotation"],
)
def test_a_rolling_restart_under_load_fails_no_create(
    cluster: ControlPlane, api: client.ApiClient, tmp_path: Path, propagation: float, rotate: bool
) -> None:
    cert_dir = tmp_path / "certs"
    drain = propagation + 2.0  # the manifests' choice: drain outlasts endpoint propagation
    replicas = [Replica(replica_config(cert_dir, drain)) for _ in range(2)]
    for replica in replicas:
        replica.start()
    balancer = Balancer()
    balancer.start()
    for replica in replicas:
        balancer.add(replica.port)
    _register(api, balancer.port, (cert_dir / "ca.crt").read_bytes())
    try:
        with Writers(cluster.kubeconfig) as writers:
            while_running(lambda: writers.created >= 50, "the first creates", {}, WAIT)
            for round_ in range(2):
                for slot, old in enumerate(list(replicas)):
                    new = Replica(replica_config(cert_dir, drain))
                    _replace(balancer, old, new, propagation)
                    replicas[slot] = new
                    if rotate and round_ == 0 and slot == 0:
                        for replica in replicas:
                            rotated = tmp_path / f"rotated-{replica.port}"
                            rotated.mkdir()
                            replica.rotate(rotated)
        print(
            f"\nrollout ({propagation:g}s propagation{', rotation' if rotate else ''}): "
            f"{writers.created} creates, {len(writers.failures)} failed"
        )
        assert writers.failures == [], writers.failures[:5]
        assert writers.created >= 500  # load, not a speed check: thousands on a quiet machine
    finally:
        _unregister(api)
        for replica in replicas:
            replica.terminate().result(WAIT)
            replica.join()
        balancer.stop()
