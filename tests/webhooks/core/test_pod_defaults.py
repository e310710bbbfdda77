"""The API server's defaulting that `review` applies before the policies: a limit with no
request of the same name becomes that request too (SetDefaults_Pod), so `review` words a
shared-GPU denial as a real server does ("in limits and requests")."""

from __future__ import annotations

from webhooks.core.pod_defaults import default_pod


def test_a_limit_without_a_request_becomes_the_request() -> None:
    pod = {
        "spec": {
            "initContainers": [{"name": "i", "resources": {"limits": {"cpu": "1"}}}],
            "containers": [
                {
                    "name": "c",
                    "resources": {
                        "limits": {"nvidia.com/gpu.shared": "2", "cpu": "2"},
                        "requests": {"cpu": "500m"},
                    },
                },
                {"name": "bare"},
            ],
        }
    }
    defaulted = default_pod(pod)
    init, main, bare = defaulted["spec"]["initContainers"][0], *defaulted["spec"]["containers"]
    assert init["resources"]["requests"] == {"cpu": "1"}
    # An existing request is kept; only the missing one is copied.
    assert main["resources"]["requests"] == {"cpu": "500m", "nvidia.com/gpu.shared": "2"}
    assert "resources" not in bare
    assert "requests" not in pod["spec"]["containers"][0]["resources"] or pod["spec"]["containers"][
        0
    ]["resources"]["requests"] == {"cpu": "500m"}, "the input is not changed"


def test_odd_shapes_are_left_alone() -> None:
    pod = {"spec": {"containers": ["not a container", {"name": "c", "resources": None}]}}
    assert default_pod(pod) == pod
