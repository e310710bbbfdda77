"""The fake kubelet and Job controller run real processes for pods created through the API."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.world.kubelet.env import ConfigError, build_env, command_line, expand
from tests.world.kubelet.run import tail_of_log
from tests.world.tests.workloads import NAMESPACE, job, job_condition, job_pods, wait_for

pytestmark = pytest.mark.e2e  # runs real processes or waits on real time: not in the fast tier

# --- pure parts ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("$(A)", "alpha"),
        ("x-$(A)-$(B)", "x-alpha-$(B)"),  # unknown references stay as written
        ("$$(A)", "$(A)"),  # $$ escapes
        ("$$", "$"),
        ("cost $5", "cost $5"),
        ("$(A", "$(A"),
        ("end$", "end$"),
    ],
)
def test_var_expansion_like_kubernetes(text, expected):
    assert expand(text, {"A": "alpha"}) == expected


class DictSources:
    def __init__(self, secrets: dict[str, dict[str, str]], config_maps: dict[str, dict]) -> None:
        self.secrets = secrets
        self.config_maps = config_maps

    def secret(self, namespace: str, name: str) -> dict[str, Any] | None:
        if name not in self.secrets:
            return None
        data = {k: base64.b64encode(v.encode()).decode() for k, v in self.secrets[name].items()}
        return {"data": data}

    def config_map(self, namespace: str, name: str) -> dict[str, Any] | None:
        return {"data": self.config_maps[name]} if name in self.config_maps else None


def test_env_resolution_order_sources_and_expansion():
    pod = {
        "metadata": {"name": "p", "namespace": "ml", "uid": "u1", "labels": {"app": "train"}},
        "spec": {"nodeName": "node-1"},
        "status": {"podIP": "10.0.0.9"},
    }
    container = {
        "name": "main",
        "command": ["echo", "$(GREETING)", "$$(GREETING)"],
        "envFrom": [
            {"secretRef": {"name": "aws"}, "prefix": "S_"},
            {"configMapRef": {"name": "cm"}},
        ],
        "env": [
            {"name": "GREETING", "value": "hi $(MODE)"},
            {"name": "MODE", "value": "fast"},
            {"name": "LATE", "value": "$(MODE)"},
            {"name": "KEY", "valueFrom": {"secretKeyRef": {"name": "aws", "key": "id"}}},
            {
                "name": "OPT",
                "valueFrom": {"secretKeyRef": {"name": "no", "key": "x", "optional": True}},
            },
            {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "CM", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "MODE"}}},
            # As the API server stores an unset divisor: "0", which the kubelet reads as 1.
            {
                "name": "MEM",
                "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "0"}},
            },
            {
                "name": "MEM_MI",
                "valueFrom": {
                    "resourceFieldRef": {
                        "containerName": "main",
                        "resource": "limits.memory",
                        "divisor": "1Mi",
                    }
                },
            },
            {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "requests.cpu"}}},
            {"name": "DISK", "valueFrom": {"resourceFieldRef": {"resource": "requests.memory"}}},
        ],
        "resources": {"limits": {"memory": "2Gi"}, "requests": {"cpu": "500m"}},
    }
    pod["spec"]["containers"] = [container]
    sources = DictSources({"aws": {"id": "AKIA"}}, {"cm": {"MODE": "slow"}})
    env = build_env(pod, container, sources)
    # MODE from envFrom exists when GREETING is expanded; the later env entry overrides it.
    assert env["GREETING"] == "hi slow"
    assert env["MODE"] == "fast"
    assert env["LATE"] == "fast"
    assert env["S_id"] == "AKIA"
    assert env["KEY"] == "AKIA"
    assert "OPT" not in env
    assert (env["NODE"], env["APP"], env["IP"], env["CM"]) == (
        "node-1",
        "train",
        "10.0.0.9",
        "slow",
    )
    # The Downward API's resources: bytes; divided and rounded up; a request not set is 0.
    assert (env["MEM"], env["MEM_MI"], env["CPU"], env["DISK"]) == ("2147483648", "2048", "1", "0")
    assert command_line(container, env) == ["echo", "hi slow", "$(GREETING)"]
    missing = {
        "name": "m",
        "env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "aws", "key": "nope"}}}],
    }
    with pytest.raises(ConfigError, match="couldn't find key nope in Secret ml/aws"):
        build_env(pod, missing, sources)


def test_log_tail_keeps_last_80_lines_and_2048_bytes():
    log = b"".join(b"line %d\n" % i for i in range(200))
    tail = tail_of_log(log)
    assert tail.splitlines()[-1] == "line 199"
    assert len(tail.splitlines()) == 80
    assert len(tail_of_log(b"x" * 5000).encode()) == 2048


# --- on the real control plane --------------------------------------------------------------


def claim(core: client.CoreV1Api, name: str) -> None:
    """A claim for a pod to mount (kube-scheduler holds a pod whose claim is missing)."""
    spec = {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}}
    core.create_namespaced_persistent_volume_claim(
        NAMESPACE, {"metadata": {"name": name}, "spec": spec}
    )


def test_job_writing_into_a_pvc_completes_with_the_file_on_the_host(kubelet, core, batch):
    claim(core, "imagenet")
    container = {
        "name": "load",
        "command": ["sh", "-c", "echo loaded > /data/imagenet/done && echo ok"],
        "volumeMounts": [{"name": "data", "mountPath": "/data/imagenet"}],
    }
    volumes = [{"name": "data", "persistentVolumeClaim": {"claimName": "imagenet"}}]
    batch.create_namespaced_job(NAMESPACE, job("load", container, pod={"volumes": volumes}))
    done = wait_for(batch.list_namespaced_job, "load", lambda j: job_condition(j) is not None)
    assert job_condition(done) == "Complete"
    assert done.status.succeeded == 1 and done.status.completion_time is not None
    assert (kubelet.pvc_dir(NAMESPACE, "imagenet") / "done").read_text() == "loaded\n"
    [pod] = job_pods(core, "load")
    assert pod.status.phase == "Succeeded"
    owner = pod.metadata.owner_references[0]
    assert (owner.kind, owner.name, owner.controller) == ("Job", "load", True)
    assert pod.metadata.labels["batch.kubernetes.io/controller-uid"] == done.metadata.uid
    assert pod.status.container_statuses[0].state.terminated.reason == "Completed"
    assert kubelet.logs(NAMESPACE, pod.metadata.name, "load") == "ok\n"
    assert not Path("/data/imagenet").exists()  # the mount point made for the run is gone


def test_failing_job_retries_up_to_backoff_limit_then_fails_with_the_message(kubelet, core, batch):
    container = {
        "name": "copy",
        "command": ["sh", "-c", "echo 'bucket not found' > /dev/termination-log; exit 3"],
    }
    batch.create_namespaced_job(NAMESPACE, job("copy", container, backoffLimit=1))
    failed = wait_for(batch.list_namespaced_job, "copy", lambda j: job_condition(j) is not None)
    assert job_condition(failed) == "Failed"
    reasons = {c.type: c.reason for c in failed.status.conditions}
    assert reasons["Failed"] == "BackoffLimitExceeded"
    assert failed.status.failed == 2  # first try + one retry
    pods = job_pods(core, "copy")
    assert len(pods) == 2
    for pod in pods:
        terminated = pod.status.container_statuses[0].state.terminated
        assert (terminated.exit_code, terminated.reason) == (3, "Error")
        assert terminated.message == "bucket not found\n"
        assert pod.status.phase == "Failed"


def test_fallback_to_logs_on_error_uses_the_log_tail(kubelet, core, batch):
    container = {
        "name": "noisy",
        "command": ["sh", "-c", "echo first; echo 'fatal: no credentials' >&2; exit 1"],
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    batch.create_namespaced_job(NAMESPACE, job("noisy", container, backoffLimit=0))
    wait_for(batch.list_namespaced_job, "noisy", lambda j: job_condition(j) == "Failed")
    [pod] = job_pods(core, "noisy")
    message = pod.status.container_statuses[0].state.terminated.message
    assert message == "first\nfatal: no credentials\n"


def test_secret_env_and_secret_volume_are_visible_to_the_process(kubelet, core):
    core.create_namespaced_secret(
        NAMESPACE,
        {
            "metadata": {"name": "s3-reader"},
            "type": "aws-credential",
            "stringData": {"AWS_ACCESS_KEY_ID": "AKIAEXAMPLE", "config": "region=eu"},
        },
    )
    pod = {
        "metadata": {"name": "reader"},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "command": [
                        "sh",
                        "-c",
                        'echo "$KEY"; cat /etc/creds/cfg; stat -c %a /etc/creds/cfg',
                    ],
                    "env": [
                        {
                            "name": "KEY",
                            "valueFrom": {
                                "secretKeyRef": {"name": "s3-reader", "key": "AWS_ACCESS_KEY_ID"}
                            },
                        }
                    ],
                    "volumeMounts": [
                        {"name": "creds", "mountPath": "/etc/creds", "readOnly": True}
                    ],
                }
            ],
            "volumes": [
                {
                    "name": "creds",
                    "secret": {
                        "secretName": "s3-reader",
                        "items": [{"key": "config", "path": "cfg"}],
                        "defaultMode": 0o400,
                    },
                }
            ],
        },
    }
    core.create_namespaced_pod(NAMESPACE, pod)
    wait_for(core.list_namespaced_pod, "reader", lambda p: p.status.phase == "Succeeded")
    assert kubelet.logs(NAMESPACE, "reader", "main") == "AKIAEXAMPLE\nregion=eu400\n"


def test_read_only_pvc_mount_cannot_be_written(kubelet, core, batch):
    claim(core, "imagenet")
    kubelet.pvc_dir(NAMESPACE, "imagenet").joinpath("train.txt").write_text("data")
    container = {
        "name": "train",
        "command": ["sh", "-c", "cat /data/train.txt && touch /data/new"],
        "volumeMounts": [{"name": "data", "mountPath": "/data", "readOnly": True}],
    }
    volumes = [{"name": "data", "persistentVolumeClaim": {"claimName": "imagenet"}}]
    batch.create_namespaced_job(
        NAMESPACE, job("train", container, backoffLimit=0, pod={"volumes": volumes})
    )
    wait_for(batch.list_namespaced_job, "train", lambda j: job_condition(j) == "Failed")
    [pod] = job_pods(core, "train")
    log = kubelet.logs(NAMESPACE, pod.metadata.name, "train")
    assert log.startswith("data")
    assert "Read-only file system" in log
    assert not kubelet.pvc_dir(NAMESPACE, "imagenet").joinpath("new").exists()


def test_gated_pod_is_bound_only_after_its_gate_is_removed(kubelet, core):
    gate = "gpu-admission.io/data-load"
    pod = {
        "metadata": {"name": "gated"},
        "spec": {
            "schedulingGates": [{"name": gate}],
            "containers": [{"name": "main", "image": "busybox", "command": ["true"]}],
        },
    }
    core.create_namespaced_pod(NAMESPACE, pod)
    # A pod created after the gated one is scheduled: once it runs, the kubelet has passed over
    # the gated pod (one worker handles events in order).
    core.create_namespaced_pod(
        NAMESPACE, {"metadata": {"name": "free"}, "spec": pod["spec"] | {"schedulingGates": []}}
    )
    wait_for(core.list_namespaced_pod, "free", lambda p: p.status.phase == "Running")
    gated = core.read_namespaced_pod("gated", NAMESPACE)
    assert gated.spec.node_name is None
    assert gated.status.phase == "Pending"
    core.patch_namespaced_pod(
        "gated", NAMESPACE, [{"op": "remove", "path": "/spec/schedulingGates"}]
    )
    running = wait_for(core.list_namespaced_pod, "gated", lambda p: p.status.phase == "Running")
    assert running.spec.node_name == kubelet.node_name
    ready = {c.type: c.status for c in running.status.conditions}
    assert ready["PodScheduled"] == ready["Ready"] == "True"


def test_env_var_expansion_reaches_the_command(kubelet, core):
    pod = {
        "metadata": {"name": "expand", "labels": {"app": "demo"}},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "command": ["echo", "$(GREETING) from $(POD)", "$$(GREETING)", "$(MISSING)"],
                    "env": [
                        {"name": "NAME", "value": "world"},
                        {"name": "GREETING", "value": "hello $(NAME)"},
                        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    ],
                }
            ],
        },
    }
    core.create_namespaced_pod(NAMESPACE, pod)
    done = wait_for(core.list_namespaced_pod, "expand", lambda p: p.status.phase == "Succeeded")
    assert done.status.container_statuses[0].state.terminated.exit_code == 0
    assert (
        kubelet.logs(NAMESPACE, "expand", "main")
        == "hello world from expand $(GREETING) $(MISSING)\n"
    )


def test_active_deadline_kills_the_pod_and_fails_the_job(kubelet, core, batch):
    container = {"name": "hang", "command": ["sleep", "600"]}
    batch.create_namespaced_job(NAMESPACE, job("hang", container, activeDeadlineSeconds=1))
    failed = wait_for(batch.list_namespaced_job, "hang", lambda j: job_condition(j) == "Failed")
    reasons = {c.type: c.reason for c in failed.status.conditions}
    assert reasons["Failed"] == "DeadlineExceeded"
    assert job_pods(core, "hang") == []  # the running pod was deleted (and its process killed)


def test_pods_that_are_not_job_pods_just_run(kubelet, core):
    pod = {
        "metadata": {"name": "idle"},
        "spec": {"containers": [{"name": "main", "image": "busybox", "command": ["false"]}]},
    }
    core.create_namespaced_pod(NAMESPACE, pod)
    running = wait_for(core.list_namespaced_pod, "idle", lambda p: p.status.phase == "Running")
    assert running.status.container_statuses[0].state.running is not None
    assert kubelet.logs(NAMESPACE, "idle", "main") == ""
