"""Namespaces of their own on the shared real control plane: each test makes its namespaces
and removes them, so the next one starts from nothing."""

from __future__ import annotations

import time

from kubernetes import client

from tests.support.waits import while_running

GONE_SECONDS = 90.0


def namespace_ready(api: client.ApiClient, name: str, labels: dict[str, str] | None = None) -> None:
    """Create a namespace (unless it exists; once an earlier one of that name is gone, if it is
    being deleted) and wait for its `default` ServiceAccount (kube-controller-manager makes it;
    until then the API server refuses pods there)."""
    core = client.CoreV1Api(api)
    meta = client.V1ObjectMeta(name=name, labels=labels)

    def created() -> bool:
        try:
            core.create_namespace(client.V1Namespace(metadata=meta))
        except client.ApiException as error:
            if error.status != 409:
                raise
            # There already; unless an earlier test's is still being deleted, that will do.
            try:
                return core.read_namespace(name).metadata.deletion_timestamp is None
            except client.ApiException as gone:
                if gone.status == 404:
                    return False  # deleted just now: create it again
                raise
        return True

    while_running(created, f"namespace {name} (an earlier one being deleted)", {}, GONE_SECONDS)

    def has_account() -> bool:
        try:
            core.read_namespaced_service_account("default", name)
        except client.ApiException as error:
            if error.status == 404:
                return False
            raise
        return True

    while_running(has_account, f"the default ServiceAccount of {name}", {}, 60)


def remove_namespace(api: client.ApiClient, name: str) -> None:
    """Delete a namespace and wait until it is gone. Pods on a node whose kubelet has stopped
    would keep it Terminating, as in a cluster; they are deleted with grace period 0, as
    `kubectl delete pod --force` does."""
    core = client.CoreV1Api(api)
    try:
        core.delete_namespace(name)
    except client.ApiException as error:
        if error.status == 404:
            return
        raise

    def gone() -> bool:
        try:
            core.read_namespace(name)
        except client.ApiException as error:
            if error.status == 404:
                return True
            raise
        for pod in core.list_namespaced_pod(name).items:
            try:
                core.delete_namespaced_pod(pod.metadata.name, name, grace_period_seconds=0)
            except client.ApiException as error:
                if error.status != 404:
                    raise
        return False

    deadline = time.monotonic() + GONE_SECONDS
    while not gone():
        assert time.monotonic() < deadline, f"namespace {name} is still there"
        time.sleep(0.2)  # polling a condition, bounded by the deadline
