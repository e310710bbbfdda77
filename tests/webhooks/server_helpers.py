"""Run the webhook app over real HTTPS in-process, and talk to it as the API server does."""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web

from certs.issue import CertBundle, ServingSpec, issue_bundle
from certs.reloader import CertReloader
from gpu_admission.cluster.dataset_snapshots import SnapshotInfo
from gpu_admission.cluster.dra import ClaimInfo, DeviceClassInfo
from gpu_admission.cluster.view import (
    ClusterView,
    NodeInfo,
    ObjectRef,
    PVCInfo,
    SecretInfo,
    ServiceAccountInfo,
)
from tests import REVIEW_FIXTURES
from webhooks.core.patch import Patch
from webhooks.core.review import AdmissionRequest
from webhooks.policies.containers import iter_containers
from webhooks.policies.interface import MutatingPolicy, Scope
from webhooks.service.server import make_runner

FIXTURES = REVIEW_FIXTURES


def fixture_bytes(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def fixture(name: str) -> dict[str, Any]:
    return json.loads(fixture_bytes(name))


def issue_localhost_bundle() -> CertBundle:
    return issue_bundle(ServingSpec("gpu-admission", "test", dns=["localhost"], ips=["127.0.0.1"]))


def client_context(bundle: CertBundle) -> ssl.SSLContext:
    """What the API server does: trust only the webhook's CA (caBundle), check the name."""
    context = ssl.create_default_context(cadata=bundle.ca_cert_pem.decode())
    return context


def server_context(bundle: CertBundle) -> ssl.SSLContext:
    reloader = CertReloader()
    reloader.reload(bundle)
    return reloader.context


@dataclass
class Running:
    url: str
    runner: web.AppRunner
    site: web.TCPSite


@asynccontextmanager
async def serving(
    app: web.Application,
    ssl_context: ssl.SSLContext | None,
    shutdown_timeout: float = 5.0,
) -> AsyncIterator[Running]:
    """Serve `app` on an ephemeral 127.0.0.1 port (HTTPS when given a context)."""
    runner = make_runner(app, shutdown_timeout)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ssl_context)
    await site.start()
    host, port = runner.addresses[0][:2]
    scheme = "https" if ssl_context is not None else "http"
    try:
        yield Running(f"{scheme}://{host}:{port}", runner, site)
    finally:
        await runner.cleanup()


def decode_patch(response: dict[str, Any]) -> list[dict[str, Any]]:
    return json.loads(base64.b64decode(response["patch"]))


class MutableView:
    """A ClusterView whose contents a test (or a test resolver) can change."""

    def __init__(self) -> None:
        self.node_records: dict[str, NodeInfo] = {}
        self.secrets: dict[tuple[str, str], SecretInfo] = {}
        self.service_accounts: dict[tuple[str, str], ServiceAccountInfo] = {}
        self.pvcs: dict[tuple[str, str], PVCInfo] = {}

    def nodes(self) -> Iterable[NodeInfo]:
        return self.node_records.values()

    def nodes_generation(self) -> int:
        # Tests change node_records directly: any change of record identity is a new generation.
        return hash(tuple(map(id, self.node_records.values())))

    def node(self, name: str) -> NodeInfo | None:
        return self.node_records.get(name)

    def generation(self) -> int:
        records = (self.node_records, self.secrets, self.service_accounts, self.pvcs)
        return hash(tuple(id(v) for r in records for v in r.values()))

    def secret(self, namespace: str, name: str) -> SecretInfo | None:
        return self.secrets.get((namespace, name))

    def service_account(self, namespace: str, name: str) -> ServiceAccountInfo | None:
        return self.service_accounts.get((namespace, name))

    def pvc(self, namespace: str, name: str) -> PVCInfo | None:
        return self.pvcs.get((namespace, name))

    def resource_claim(self, namespace: str, name: str) -> ClaimInfo | None:
        return None

    def resource_claim_template(self, namespace: str, name: str) -> ClaimInfo | None:
        return None

    def device_class(self, name: str) -> DeviceClassInfo | None:
        return None

    def dataset_snapshots(self, namespace: str, key: str) -> Iterable[SnapshotInfo]:
        return ()


class FillingResolver:
    """A MissResolver that fills the view from a table of known objects, as a direct GET would,
    and records what it was asked for."""

    def __init__(self, view: MutableView, known: dict[ObjectRef, Callable[[], None]]) -> None:
        self.view = view
        self.known = known
        self.asked: list[ObjectRef] = []

    async def resolve(self, refs: Iterable[ObjectRef]) -> None:
        for ref in refs:
            self.asked.append(ref)
            fill = self.known.get(ref)
            if fill is not None:
                await asyncio.sleep(0)  # a real lookup yields to the loop
                fill()


async def post_review(
    session: aiohttp.ClientSession, url: str, body: bytes
) -> tuple[int, dict[str, Any]]:
    async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as r:
        return r.status, await r.json()


# Small real policies for tests of the chain and the service.


def annotate(key: str, value: str) -> MutatingPolicy:
    def mutate(request: AdmissionRequest, patch: Patch, view: ClusterView) -> None:
        patch.set_annotation(key, value)

    return MutatingPolicy(f"annotate {key}", Scope("Pod"), mutate)


def env_everywhere(name: str, value: str) -> MutatingPolicy:
    def mutate(request: AdmissionRequest, patch: Patch, view: ClusterView) -> None:
        for ref in iter_containers(request.object):
            patch.set_env(ref.path, {"name": name, "value": value})

    return MutatingPolicy(f"env {name}", Scope("Pod"), mutate)
