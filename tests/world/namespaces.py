"""Namespaces on the shared real control plane: a test makes the namespaces it needs (or finds
them emptied by the sweep after the test before, tests/world/sweep.py)."""

from __future__ import annotations

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
