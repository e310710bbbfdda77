"""`kubectl apply -k manifests/` on a real node, then what a researcher does with it.

Every pod here runs on the real kubelet from the project's image (or the pause image): the
product's Deployments through their own probes, the loader Jobs the installed controller makes,
and the researchers' pods. The tests run in file order on one install; the last one uninstalls.
"""

from __future__ import annotations

import argparse
import io
import json
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from commands.audit import EXIT_FINDINGS, audit_command
from tests.install.cluster import (
    IMAGE,
    NEXT_IMAGE,
    InstallCluster,
    wait_for,
)
from tests.install.journeys import (
    BASE,
    NS,
    PREFIX,
    consumer,
    controller_metrics,
    dataset_pvc,
    finished,
    installed_product,
    loading_message,
    pod,
    pvc_annotations,
    s3_secret,
    waiting,
)
from tests.world.namespaces import namespace_ready
from tests.world.node import network
from tests.world.node.network import SUBNET
from tests.world.stand_ins.holding_proxy import ThreadedHoldingProxy
from tests.world.stand_ins.trickle import Trickle


@pytest.fixture(scope="module")
def installed(install_cluster: InstallCluster) -> Iterator[InstallCluster]:
    with installed_product(install_cluster, BASE):
        yield install_cluster


def webhook_pods(cluster: InstallCluster) -> list[client.V1Pod]:
    selector = "app.kubernetes.io/name=gpu-admission"
    return cluster.core.list_namespaced_pod("gpu-admission", label_selector=selector).items


def test_both_deployments_run_two_replicas_on_one_node(installed: InstallCluster) -> None:
    pods = webhook_pods(installed)
    assert len(pods) == 2
    assert {p.spec.node_name for p in pods} == {installed.node.name}  # a one-node cluster
    addresses = {p.status.pod_ip for p in pods}
    assert len(addresses) == 2 and all(a.startswith(SUBNET.rsplit(".", 2)[0]) for a in addresses)
    for deployment in ("gpu-admission", "gpu-admission-controller"):
        status = (
            client.AppsV1Api(installed.api)
            .read_namespaced_deployment(deployment, "gpu-admission")
            .status
        )
        assert status.ready_replicas == 2, deployment


def test_the_configuration_reads_past_the_kubelets_service_variables(
    installed: InstallCluster,
) -> None:
    # The shipped Deployments turn service links off; a pod of the namespace that keeps them (the
    # kubelet's default) gets GPU_ADMISSION_SERVICE_HOST and the rest, and the config still loads.
    check = pod(
        "config-check",
        "env | grep -c '^GPU_ADMISSION_' && gpu-admission admission-policy"
        " --config /etc/gpu-admission/config.yaml > /dev/null && echo config-loaded",
        container={"volumeMounts": [{"name": "config", "mountPath": "/etc/gpu-admission"}]},
        volumes=[{"name": "config", "configMap": {"name": installed.config_map_name()}}],
    )
    check["metadata"]["namespace"] = "gpu-admission"
    installed.apply([check])
    log = finished(installed, "config-check", "gpu-admission")
    variables, outcome = log.split()
    assert int(variables) >= 8, log  # GPU_ADMISSION_SERVICE_HOST, _PORT_443_TCP_ADDR, ...
    assert outcome == "config-loaded"


def test_a_cpu_pod_is_told_it_has_no_gpu(installed: InstallCluster) -> None:
    cuda_like = pod(
        "cuda-cpu-only",
        'echo "visible=$NVIDIA_VISIBLE_DEVICES"',
        container={"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]},
    )
    installed.apply([cuda_like])
    assert finished(installed, "cuda-cpu-only").strip() == "visible=none"


def test_two_shared_gpus_are_refused(installed: InstallCluster) -> None:
    greedy = pod(
        "notebook",
        "true",
        container={"resources": {"limits": {"nvidia.com/gpu.shared": "2"}}},
    )
    refused = installed.apply([greedy], check=False)
    assert refused.returncode != 0
    assert "gpu-admission-pods" in refused.stderr and "nvidia.com/gpu.shared" in refused.stderr
    with pytest.raises(client.ApiException):
        installed.core.read_namespaced_pod("notebook", NS)


def _job(name: str, template: dict[str, Any]) -> dict[str, Any]:
    template["spec"]["restartPolicy"] = "Never"
    meta = {"name": name, "namespace": NS}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {"template": template},
    }


def test_a_workload_is_refused_or_warned_when_it_is_written(installed: InstallCluster) -> None:
    """Through the installed policy and the installed workloads webhook (over its Service)."""
    greedy = {
        "name": "train",
        "image": "cuda",
        "resources": {"limits": {"nvidia.com/gpu.shared": "2"}},
    }
    refused = installed.apply([_job("greedy", {"spec": {"containers": [greedy]}})], check=False)
    assert refused.returncode != 0
    assert "gpu-admission-workloads" in refused.stderr
    assert 'Job "greedy": container "train" asks for 2 of nvidia.com/gpu.shared' in refused.stderr
    with pytest.raises(client.ApiException):
        client.BatchV1Api(installed.api).read_namespaced_job("greedy", NS)
    wants = {
        "metadata": {"annotations": {f"{PREFIX}cloud-credentials": "not-there-yet"}},
        "spec": {"containers": [{"name": "eval", "image": "python"}]},
    }
    warned = installed.apply([_job("wants-creds", wants)], "--dry-run=server")
    assert 'Warning: Job "wants-creds": its pods would be refused as the cluster is now' in (
        warned.stderr
    )
    assert 'Secret "not-there-yet"' in warned.stderr


def test_a_misspelt_credential_secret_is_refused(installed: InstallCluster) -> None:
    refused = installed.kubectl(
        *("-n", NS, "create", "secret", "generic", "s3-writer", "--type=aws-credential"),
        "--from-literal=AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE",
        "--from-literal=AWS_SECRET_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        check=False,
    )
    assert refused.returncode != 0
    assert "did you mean AWS_SECRET_ACCESS_KEY" in refused.stderr
    assert "wJalrXUtnFEMI" not in refused.stderr  # the value is never echoed


def test_a_dataset_is_loaded_and_its_consumer_reads_it(installed: InstallCluster) -> None:
    installed.s3.put(
        "weights", {"model/config.json": b'{"layers": 12}\n', "model/w.bin": b"\x01" * 4096}
    )
    s3_secret(installed, "s3-reader")
    installed.apply([dataset_pvc("weights", "s3://weights/model", "s3-reader")])
    consumer = pod(
        "reader",
        "cat /data/config.json && wc -c < /data/w.bin",
        container={"volumeMounts": [{"name": "data", "mountPath": "/data"}]},
        volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "weights"}}],
    )
    installed.apply([consumer])
    gates = installed.core.read_namespaced_pod("reader", NS).spec.scheduling_gates or []
    assert gates, "the consumer waits behind the dataset's scheduling gate"
    phase = wait_for(
        lambda: (
            pvc_annotations(installed, "weights").get(f"{PREFIX}data-load-phase")
            in ("Succeeded", "Failed")
            and pvc_annotations(installed, "weights")[f"{PREFIX}data-load-phase"]
        ),
        "the load to end",
        timeout=180,
    )
    assert phase == "Succeeded", pvc_annotations(installed, "weights")
    assert finished(installed, "reader").split() == ['{"layers":', "12}", "4096"]
    # The version it read is recorded: the digest of the listing, its files and bytes.
    loaded = pvc_annotations(installed, "weights")
    assert loaded[f"{PREFIX}data-digest"].startswith("sha256:")
    assert (loaded[f"{PREFIX}data-digest-files"], loaded[f"{PREFIX}data-digest-bytes"]) == (
        "2",
        str(len(b'{"layers": 12}\n') + 4096),
    )


def _scaled(cluster: InstallCluster, replicas: int) -> None:
    """The webhook Deployment scaled, and waited for: no replica left, or all of them ready."""
    cluster.kubectl(
        "-n", "gpu-admission", "scale", "deployment/gpu-admission", f"--replicas={replicas}"
    )
    if replicas:
        cluster.rolled_out("gpu-admission")
    else:
        wait_for(lambda: not webhook_pods(cluster), "the webhook replicas to be gone")


def test_while_the_service_is_down_only_the_pods_that_need_it_wait(
    installed: InstallCluster, held_store: ThreadedHoldingProxy, request: pytest.FixtureRequest
) -> None:
    """Both webhook replicas gone: what needs no cluster state is admitted by the API server
    alone (CPU-only pods hidden from the GPUs); what needs it is refused saying the service is
    unavailable; what the policy refuses is refused in its words. Scaled back, all is as before."""
    label = f"{PREFIX}serviceaccount-credentials"
    bound = "bound-team"
    namespace_ready(installed.api, bound, labels={label: "true"})

    def clean_up() -> None:  # pass or fail: nothing of this test holds the node or a load slot
        held_store.release()
        installed.kubectl("-n", NS, "delete", "deployment", "web", "--ignore-not-found")
        # The dataset read through the proxy, which goes with this test: a later audit of the
        # sources would wait out its whole timeout on a proxy no longer there.
        installed.kubectl("-n", NS, "delete", "pod", "reads-loading", "--ignore-not-found")
        installed.kubectl("-n", NS, "delete", "pvc", "loading", "--ignore-not-found")
        installed.kubectl("delete", "namespace", bound, "--wait=false", "--ignore-not-found")

    request.addfinalizer(clean_up)
    for namespace in (NS, bound):
        s3_secret(installed, "s3-down", namespace=namespace)
    account = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {
            "name": "trainer",
            "namespace": bound,
            "annotations": {f"{PREFIX}cloud-credentials": "s3-down"},
        },
    }
    # The guard reads the namespace from the API server's cache, a moment behind the write.
    wait_for(
        lambda: installed.apply([account], check=False).returncode == 0,
        "the binding to be admitted in the labelled namespace",
    )
    installed.s3.put("held-data", {"x.bin": b"\x02" * 1024})
    held_store.hold("held-data")
    s3_secret(installed, "s3-held", endpoint=held_store.endpoint)
    installed.apply([dataset_pvc("loading", "s3://held-data", "s3-held")])
    wait_for(lambda: held_store.held.get("held-data", 0) > 0, "the load to be in flight")

    names_credentials = pod("names-creds", "env | grep -c ^AWS_ACCESS_KEY_ID")
    names_credentials["metadata"]["annotations"] = {f"{PREFIX}cloud-credentials": "s3-down"}
    of_bound_account = pod("bound-creds", "env | grep -c ^AWS_ACCESS_KEY_ID")
    of_bound_account["metadata"]["namespace"] = bound
    of_bound_account["spec"]["serviceAccountName"] = "trainer"
    reads_loading = consumer("reads-loading", "loading", "true")
    _scaled(installed, 0)
    try:
        web = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "namespace": NS},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {
                        "containers": [
                            {
                                "name": "web",
                                "image": IMAGE,
                                "imagePullPolicy": "Never",
                                "command": ["sh", "-c", "sleep 3600"],
                                "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}],
                            }
                        ]
                    },
                },
            },
        }
        installed.apply([web])
        rolled = installed.kubectl(
            "-n", NS, "rollout", "status", "deployment/web", "--timeout=120s", check=False
        )
        assert rolled.returncode == 0, rolled.stderr + installed.diagnosis(NS)
        pods = installed.core.list_namespaced_pod(NS, label_selector="app=web").items
        assert len(pods) == 2
        for running in pods:
            env = [(e.name, e.value) for e in running.spec.containers[0].env]
            assert [e for e in env if e[0] == "NVIDIA_VISIBLE_DEVICES"] == [
                ("NVIDIA_VISIBLE_DEVICES", "none")
            ]
        # Refused in the policy's words, as ever: never a call to the service.
        greedy = pod(
            "greedy", "true", container={"resources": {"limits": {"nvidia.com/gpu.shared": "2"}}}
        )
        refused = installed.apply([greedy], check=False)
        assert "ValidatingAdmissionPolicy 'gpu-admission-pods'" in refused.stderr
        assert "failed calling webhook" not in refused.stderr
        # Refused until the service is back, saying it is unavailable.
        for needing, webhook in (
            (names_credentials, "pods.mutate.gpu-admission.io"),
            (of_bound_account, "serviceaccount-pods.mutate.gpu-admission.io"),
            (reads_loading, "pods.mutate.gpu-admission.io"),
        ):
            refused = installed.apply([needing], check=False)
            assert refused.returncode != 0
            assert f'failed calling webhook "{webhook}"' in refused.stderr, refused.stderr
            assert 'no endpoints available for service "gpu-admission"' in refused.stderr, (
                refused.stderr
            )
    finally:
        _scaled(installed, 2)
    # Back: each is admitted as before.
    wait_for(
        lambda: installed.apply([names_credentials], check=False).returncode == 0,
        "the webhooks to answer again",
    )
    assert finished(installed, "names-creds").strip() == "1"
    installed.apply([of_bound_account])
    assert finished(installed, "bound-creds", namespace=bound).strip() == "1"
    installed.apply([reads_loading])
    assert waiting(installed, "reads-loading")  # gated until its dataset has loaded


def test_audit_sources_names_a_dataset_whose_source_changed(
    installed: InstallCluster, tmp_path: Path
) -> None:
    """The check Job runs on the real node from the project's image, with the PVC's Secret."""
    installed.s3.put("corpus-v", {"a.txt": b"first\n", "b.txt": b"kept\n"})
    s3_secret(installed, "s3-corpus-v")
    installed.apply([dataset_pvc("versioned", "s3://corpus-v", "s3-corpus-v")])
    wait_for(
        lambda: (
            pvc_annotations(installed, "versioned").get(f"{PREFIX}data-load-phase") == "Succeeded"
        ),
        "the load to succeed",
        timeout=180,
    )
    then = pvc_annotations(installed, "versioned")[f"{PREFIX}data-digest"]
    installed.s3.put("corpus-v", {"a.txt": b"other\n"})  # the same size, new bytes
    # The audit builds its Jobs from the controller's own configuration.
    config = installed.core.read_namespaced_config_map(installed.config_map_name(), "gpu-admission")
    config_file = tmp_path / "config.yaml"
    config_file.write_text(config.data["config.yaml"])
    out, err = io.StringIO(), io.StringIO()
    args = argparse.Namespace(
        kubeconfig=installed.plane.kubeconfig,
        config=config_file,
        output="json",
        namespace=NS,
        sources=True,
        sources_timeout=180,
        sources_parallel=8,
    )
    assert audit_command(args, out, err) == EXIT_FINDINGS, err.getvalue()
    report = json.loads(out.getvalue())
    sources = {f["name"]: f for f in report["findings"] if f["policy"] == "dataset-source-version"}
    assert sources["versioned"]["result"] == "source changed", err.getvalue()
    message = sources["versioned"]["message"]
    assert message.startswith("s3://corpus-v changed since it was loaded: it lists 2 files")
    assert f"(digest {then.removeprefix('sha256:')[:12]})" in message
    assert "data-load-retry=<any new value>" in message
    assert "weights" not in sources  # its source is as it was loaded
    checked = report["summary"]["objects"]["dataset sources"]
    assert checked >= 2 and f"checking the sources of {checked} loaded dataset PVC(s)" in (
        err.getvalue()
    )
    # The audit's Jobs are gone (deleting them is asked; the API server may still hold them
    # while their pods go, marked for deletion).
    jobs = client.BatchV1Api(installed.api).list_namespaced_job(
        NS, label_selector=f"{PREFIX}source-check"
    )
    assert all(j.metadata.deletion_timestamp for j in jobs.items)


def test_a_source_too_big_for_its_volume_fails_at_once_and_is_not_retried(
    installed: InstallCluster,
) -> None:
    # 300 MB into a 4 MiB claim: the loader lists, compares, and stops before writing.
    installed.s3.put("huge", {f"shard-{i}.bin": bytes(100_000_000) for i in range(3)})
    s3_secret(installed, "s3-huge")
    claim = dataset_pvc("tiny", "s3://huge", "s3-huge")
    claim["spec"]["resources"]["requests"]["storage"] = "4Mi"
    installed.apply([claim])
    phase = wait_for(
        lambda: pvc_annotations(installed, "tiny").get(f"{PREFIX}data-load-phase") == "Failed",
        "the load to fail",
        timeout=60,
    )
    assert phase
    claim_now = installed.core.read_namespaced_persistent_volume_claim("tiny", NS)
    [loading] = [c for c in claim_now.status.conditions if c.type == "Loading"]
    assert "the source holds 286 MiB; the volume has 4.0 MiB free: request a larger PVC" in (
        loading.message
    )
    assert "trying again cannot fix this, so it was not retried" in loading.message
    job = pvc_annotations(installed, "tiny")[f"{PREFIX}data-load-job"]
    status = client.BatchV1Api(installed.api).read_namespaced_job(job, NS).status
    assert status.failed == 1  # one attempt, no retry
    volume = installed.core.read_persistent_volume(claim_now.spec.volume_name)
    written = sum(
        f.stat().st_size for f in Path(volume.spec.host_path.path).rglob("*") if f.is_file()
    )
    assert written < 64 * 1024, f"{written} bytes written"


@pytest.fixture(scope="module")
def trust_and_stall(installed: InstallCluster) -> Iterator[Trickle]:
    """What a platform engineer sets for loaders: their settings.yaml in the ConfigMap the
    programs mount (patched in place, so the controller is restarted by hand). Loaders trust
    the CA in each namespace's ConfigMap `corp-ca`, give up after 5 s without data, and are
    retried once. Serves a stalling HTTPS file on the pod network."""
    settings = {
        "dataset": {
            "trusted_ca_config_map": "corp-ca",
            "stall_timeout_seconds": 5,
            "backoff_limit": 1,
        }
    }
    installed.core.patch_namespaced_config_map(
        installed.config_map_name(),
        "gpu-admission",
        {"data": {"settings.yaml": yaml.safe_dump(settings)}},
    )
    installed.kubectl(
        "-n", "gpu-admission", "rollout", "restart", "deployment/gpu-admission-controller"
    )
    installed.rolled_out("gpu-admission-controller")
    trickle = Trickle(size=300 * 1024, first=64 * 1024, host=network.HOST)
    try:
        yield trickle
    finally:
        trickle.stop()


def test_a_loader_that_cannot_start_is_named_on_its_pvc(
    installed: InstallCluster, trust_and_stall: Trickle
) -> None:
    # This namespace has no `corp-ca`: the kubelet cannot mount it (FailedMount), and the PVC
    # says why.
    installed.s3.put("corpus", {"a.txt": b"a\n"})
    s3_secret(installed, "s3-corpus")
    installed.apply([dataset_pvc("corpus", "s3://corpus", "s3-corpus")])
    message = wait_for(
        lambda: (
            "corp-ca" in loading_message(installed, "corpus")
            and loading_message(installed, "corpus")
        ),
        "the PVC to name the missing ConfigMap",
        timeout=180,
    )
    assert 'configmap "corp-ca" not found' in message.lower() or "corp-ca" in message


def test_a_source_that_stops_sending_is_given_up_and_said_on_the_pvc(
    installed: InstallCluster, trust_and_stall: Trickle
) -> None:
    namespace = "web"
    installed.namespace(namespace)
    trust = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "corp-ca", "namespace": namespace},
    }
    installed.apply([{**trust, "data": {"ca.crt": trust_and_stall.ca.decode()}}])
    claim = dataset_pvc("stalled", trust_and_stall.url("weights.bin"), "")
    del claim["metadata"]["annotations"][f"{PREFIX}data-credentials"]
    claim["metadata"]["namespace"] = namespace
    installed.apply([claim])

    def failed() -> str | None:
        claim_now = installed.core.read_namespaced_persistent_volume_claim("stalled", namespace)
        phase = (claim_now.metadata.annotations or {}).get(f"{PREFIX}data-load-phase")
        return loading_message(installed, "stalled", namespace) if phase == "Failed" else None

    message = wait_for(failed, "the stalled load to fail after its retry", timeout=180)
    assert "the source stopped sending: no data for 5s; 64.0 KiB of 300 KiB copied" in message
    assert "it failed 2 times" in message  # the first attempt was retried
    installed.kubectl("delete", "namespace", namespace, "--wait=false")


def test_an_upgrade_under_eight_writers_fails_no_create(installed: InstallCluster) -> None:
    namespace = "writers"
    installed.namespace(namespace)
    failures: list[str] = []
    created = [0]
    lock = threading.Lock()
    stop = threading.Event()

    def write() -> None:
        core = client.CoreV1Api(installed.api)
        while not stop.is_set():
            name = f"w-{uuid.uuid4().hex[:10]}"
            body = {
                "metadata": {"name": name},
                "spec": {
                    # Held back from the node: admission is what is measured, not the kubelet.
                    "schedulingGates": [{"name": "test.gpu-admission.io/hold"}],
                    "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
                },
            }
            try:
                core.create_namespaced_pod(namespace, body, _preload_content=False)
                with lock:
                    created[0] += 1
            except client.ApiException as error:
                with lock:
                    failures.append(f"{error.status}: {error.body!s:.300}")

    writers = [threading.Thread(target=write, daemon=True) for _ in range(8)]
    for thread in writers:
        thread.start()
    try:
        wait_for(lambda: created[0] >= 40, "the writers to be creating pods")
        before = {p.metadata.name for p in webhook_pods(installed)}
        installed.kubectl(
            "-n",
            "gpu-admission",
            "set",
            "image",
            "deployment/gpu-admission",
            f"gpu-admission={NEXT_IMAGE}",
        )
        installed.rolled_out("gpu-admission")
        at_rollout_end = created[0]
        wait_for(lambda: created[0] >= at_rollout_end + 40, "writes after the rollout")
    finally:
        stop.set()
        for thread in writers:
            thread.join(timeout=30)
    # `rollout status` ends when the old pods are told to stop; they drain for a while after.
    after = [p for p in webhook_pods(installed) if p.metadata.deletion_timestamp is None]
    assert not failures, (
        f"{len(failures)} of {created[0] + len(failures)} creates failed: {failures[:3]}"
    )
    assert {p.metadata.name for p in after}.isdisjoint(before)
    assert {p.spec.containers[0].image for p in after} == {NEXT_IMAGE}
    print(f"\nupgrade: {created[0]} pods created by 8 writers across the rollout, 0 failed")
    installed.kubectl("delete", "namespace", namespace, "--wait=false")


VISIBILITY = ("mutatingadmissionpolicy", "gpu-admission-gpu-visibility")


def _visibility_state(cluster: InstallCluster, state: str) -> bool:
    series = (
        'gpu_admission_admission_object_state{kind="MutatingAdmissionPolicy",'
        f'name="gpu-admission-gpu-visibility",state="{state}"}} 1.0'
    )
    return series in controller_metrics(cluster)


def _hidden(cluster: InstallCluster) -> bool:
    """Whether a CPU-only pod is admitted with NVIDIA_VISIBLE_DEVICES=none (a dry run)."""
    made = cluster.apply([pod("unhidden", "true")], "--dry-run=server", "-o", "json")
    env = json.loads(made.stdout)["spec"]["containers"][0].get("env") or []
    return {"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"} in env


def test_a_pruned_visibility_policy_is_put_back_and_said_on_the_service_deployment(
    installed: InstallCluster,
) -> None:
    """A GitOps prune or a partial apply deletes the MutatingAdmissionPolicy: the leading
    controller writes it back within seconds and says so on the service's Deployment; CPU-only
    pods are hidden again without anyone applying anything."""
    wait_for(lambda: _visibility_state(installed, "ok"), "the installed policy reported ok")
    installed.kubectl("delete", *VISIBILITY)
    said = "MutatingAdmissionPolicy gpu-admission-gpu-visibility applied (it was missing)"
    wait_for(
        lambda: installed.told_on_service(said),
        "the controller to say it wrote the policy back",
        diagnosis=installed.diagnosis,
    )
    wait_for(lambda: _visibility_state(installed, "ok"), "the gauge to say ok")
    wait_for(lambda: _hidden(installed), "CPU-only pods hidden again")


def test_uninstall_leaves_no_webhook_or_policy(installed: InstallCluster) -> None:
    installed.uninstall(BASE)
    registration = client.AdmissionregistrationV1Api(installed.api)

    def mine(items: list[Any]) -> list[str]:
        return [i.metadata.name for i in items if i.metadata.name.startswith("gpu-admission")]

    assert mine(registration.list_mutating_webhook_configuration().items) == []
    assert mine(registration.list_validating_webhook_configuration().items) == []
    assert mine(registration.list_validating_admission_policy().items) == []
    assert mine(registration.list_validating_admission_policy_binding().items) == []
    assert mine(registration.list_mutating_admission_policy().items) == []
    assert mine(registration.list_mutating_admission_policy_binding().items) == []
    # Nothing left fails closed: pods are admitted without the service (once the API server has
    # dropped the configurations from its informers, a moment after the delete).
    wait_for(
        lambda: (
            installed.apply([pod("after", "true")], "--dry-run=server", check=False).returncode == 0
        ),
        "pods admitted after the uninstall",
    )
