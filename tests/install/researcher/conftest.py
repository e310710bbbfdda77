"""One install for a researcher's journeys on the real node (loads, and pods given credentials):
the product applied through a platform engineer's own kustomize overlay over `manifests/` (the
usual way to customise an install), beside the stores the loaders read, all on the pod network,
where a real pod can reach them.

The overlay sets what an engineer sets for their stores: the endpoints of S3 (for anonymous
reads; a Secret names its own), AWS STS (for keyless reads), GCS, Azure Blob and the Hugging
Face Hub (a private mirror), and the private CAs of the web server's, the Hub's and Google STS's
certificates (the `trust-bundle` ConfigMap, in the researchers' namespace); and a loader command
that fails the first attempt of one shard of `s3://flaky-data`, turns rclone's own retries down
for `az://busy` and `s3://comes-back`, so a failure reaches the Job, whose retries the journeys
are about, and opens a connection per request for `s3://watched-data`, so the proxy in front of
it holds requests one by one. Progress is read every half second, so a journey sees it move."""

from __future__ import annotations

import json
import os
import ssl
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from controllers.dataset.jobspec import DATA_MOUNT_PATH
from tests import ROOT
from tests.install.cluster import InstallCluster
from tests.install.journeys import BASE, NS, installed_product
from tests.world.node import network
from tests.world.stand_ins.azurite import ACCOUNT, Azurite, AzuriteMissing
from tests.world.stand_ins.entra_id import EntraId
from tests.world.stand_ins.flaky_proxy import FlakyProxy, flaky_proxy
from tests.world.stand_ins.google_sts import GoogleSts
from tests.world.stand_ins.hf_hub import HubStandIn, hub_stand_in
from tests.world.stand_ins.objectstores import GcsStore, gcs_store
from tests.world.stand_ins.sts_gate import StsGate
from tests.world.stand_ins.web_files import WebFiles, web_files

TRUST_BUNDLE = "trust-bundle"

# The loader command the overlay sets (GPU_ADMISSION_DATASET__LOADER_COMMAND on the controller).
# s3://flaky-data: shard 2's first attempt fails before loading anything; its retry removes the
# marker the first left on the volume (the only place two attempts share), then loads.
# az://busy, s3://comes-back: rclone tries once, so an unreachable or busy store fails the pod
# and the Job retries it. s3://watched-data: no keep-alive. az://keyless-models: the Blob
# service that takes Entra's tokens. Every other load runs the loader as it is.
MARKER = f"{DATA_MOUNT_PATH}/.shard-2-failed-once"


def loader_command(keyless_azure_endpoint: str) -> list[str]:
    return [
        "sh",
        "-c",
        'case "$*" in *s3://flaky-data*) if [ "$JOB_COMPLETION_INDEX" = 2 ]; then '
        f'if [ ! -e {MARKER} ]; then touch {MARKER}; echo "network went away" >&2; exit 1; fi; '
        f"rm -f {MARKER}; fi;; *az://busy*|*s3://comes-back*) "
        "export RCLONE_LOW_LEVEL_RETRIES=1 RCLONE_RETRIES=1;; "
        "*s3://watched-data*) export RCLONE_DISABLE_HTTP_KEEP_ALIVES=true;; "
        f"*az://keyless-models*) export RCLONE_AZUREBLOB_ENDPOINT={keyless_azure_endpoint};; "
        'esac; exec "$@"',
        "sh",
        "gpu-admission",
        "load",
    ]


@dataclass(frozen=True)
class Stores:
    """The stores on the pod network. `azure` is None where Azurite is not installed
    (`azure_missing` says why; under CI that is a failure)."""

    web: WebFiles
    hub: HubStandIn
    gcs: GcsStore
    sts: StsGate  # its keys, trust and moto endpoint are set by the journey that uses it
    google_sts: GoogleSts  # named by a Secret's federation file: no setting needed
    entra: EntraId  # Microsoft Entra ID, the private cloud's authority for keyless Azure
    azure: Azurite | None
    busy_azure: FlakyProxy | None  # in front of `azure`: every az:// load goes through it
    keyless_azure: Azurite | None  # HTTPS, taking Entra's tokens: az://keyless-models only
    azure_missing: str = ""


def engineer_overlay(folder: Path, s3_endpoint: str, stores: Stores) -> Path:
    loader_env = {
        "RCLONE_RETRIES_SLEEP": "0.1s",
        "RCLONE_S3_ENDPOINT": s3_endpoint,
        "RCLONE_GCS_ENDPOINT": stores.gcs.endpoint,
        "AWS_ENDPOINT_URL_STS": stores.sts.endpoint,
        # A private cloud's Entra authority (instance discovery asks login.microsoftonline.com,
        # which knows Azure's public authorities only).
        "AZURE_AUTHORITY_HOST": stores.entra.authority_host,
        "RCLONE_AZUREBLOB_DISABLE_INSTANCE_DISCOVERY": "true",
    }
    keyless_azure = stores.keyless_azure.endpoint if stores.keyless_azure else "none"
    settings: dict[str, Any] = {
        "GPU_ADMISSION_DATASET__LOADER_COMMAND": loader_command(keyless_azure),
        "GPU_ADMISSION_DATASET__TRUSTED_CA_CONFIG_MAP": TRUST_BUNDLE,
        "GPU_ADMISSION_DATASET__LOADER_ENV": loader_env,
        "GPU_ADMISSION_DATASET__PROGRESS_INTERVAL_SECONDS": 0.5,
        "GPU_ADMISSION_DATASET__TRANSFERS": 32,
        "GPU_ADMISSION_DATASET__HUGGINGFACE_ENDPOINT": stores.hub.endpoint,
    }
    if stores.busy_azure is not None:
        loader_env["RCLONE_AZUREBLOB_ENDPOINT"] = f"{stores.busy_azure.base}/{ACCOUNT}"
    patch = [
        {
            "op": "add",
            "path": "/spec/template/spec/containers/0/env/-",
            "value": {"name": name, "value": json.dumps(value)},
        }
        for name, value in settings.items()
    ]
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        # kustomize takes no absolute path to a base
        "resources": [os.path.relpath(ROOT / BASE, folder)],
        "patches": [
            {
                "target": {"kind": "Deployment", "name": "gpu-admission-controller"},
                "patch": json.dumps(patch),
            }
        ],
    }
    (folder / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    return folder


@pytest.fixture(scope="package")
def stores(install_cluster: InstallCluster) -> Iterator[Stores]:
    with ExitStack() as stack:
        web = stack.enter_context(web_files(host=network.HOST))
        hub = stack.enter_context(hub_stand_in(host=network.HOST))
        gcs = stack.enter_context(gcs_store(host=network.HOST))
        plane = install_cluster.plane
        context = ssl.create_default_context(cafile=str(plane.ca_path))
        sts = StsGate(install_cluster.s3.endpoint, plane.url, context, ("", ""), host=network.HOST)
        stack.callback(sts.stop)
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="google-sts-")))
        google_sts = GoogleSts(plane.url, context, folder, host=network.HOST)
        stack.callback(google_sts.stop)
        entra = EntraId(plane.url, context, folder, host=network.HOST)
        stack.callback(entra.stop)
        try:
            azure = Azurite(host=network.HOST)
        except AzuriteMissing as missing:
            if os.environ.get("CI"):
                raise
            yield Stores(web, hub, gcs, sts, google_sts, entra, None, None, None, str(missing))
            return
        stack.callback(azure.stop)
        busy = stack.enter_context(flaky_proxy(azure.endpoint, host=network.HOST))
        keyless = Azurite(oauth=True, host=network.HOST)
        stack.callback(keyless.stop)
        yield Stores(web, hub, gcs, sts, google_sts, entra, azure, busy, keyless)


@pytest.fixture(scope="package")
def installed(
    install_cluster: InstallCluster, stores: Stores, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[InstallCluster]:
    folder = tmp_path_factory.mktemp("ops")
    overlay = engineer_overlay(folder, install_cluster.s3.endpoint, stores)
    with installed_product(install_cluster, str(overlay)):
        cas = [stores.web.ca_path, stores.hub.ca_path, stores.google_sts.ca_path]
        cas.append(stores.entra.ca_path)
        if stores.keyless_azure is not None and stores.keyless_azure.ca_path is not None:
            cas.append(stores.keyless_azure.ca_path)
        bundle = {"ca.crt": "".join(path.read_text() for path in cas)}
        install_cluster.core.create_namespaced_config_map(
            NS, {"metadata": {"name": TRUST_BUNDLE}, "data": bundle}
        )
        yield install_cluster
