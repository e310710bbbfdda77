"""The guard of the ConfigMaps GPU-sharing schedulers give GPUs through: who may write the key,
when, and where the objects go (tests/real_api/test_kai_scheduler.py runs it on the real API
server)."""

from __future__ import annotations

from gpu_admission.config.model import Config
from webhooks.apiserver_policies.bindings import admission_policy_objects
from webhooks.apiserver_policies.install_expectation import expected_objects
from webhooks.apiserver_policies.scheduler_configmaps import POLICY_NAME, refuses
from webhooks.apiserver_policies.webhook_configurations import Layout

BINDER = "system:serviceaccount:kai-scheduler:binder"
CONFIG = Config()


def _map(value: str | None, **more: str) -> dict:
    data = {**more, **({"NVIDIA_VISIBLE_DEVICES": value} if value is not None else {})}
    return {"metadata": {"name": "m"}, "data": data}


def test_only_the_schedulers_writers_set_or_change_the_key() -> None:
    assert not refuses(None, _map(None), BINDER, CONFIG)
    assert not refuses(_map(None), _map("GPU-1"), BINDER, CONFIG)
    assert refuses(None, _map("all"), "alice", CONFIG)
    assert refuses(_map(None), _map("all"), "alice", CONFIG)  # added
    assert refuses(_map("GPU-1"), _map("all"), "alice", CONFIG)  # changed
    assert not refuses(_map("GPU-1"), _map("GPU-1", GPU_PORTION="0.5"), "alice", CONFIG)
    assert not refuses(_map("GPU-1"), _map(None), "alice", CONFIG)  # removed: nothing widened
    assert not refuses(None, _map(None, PATH="/bin"), "alice", CONFIG)


def test_the_guard_follows_the_env_guards_mode_and_the_schedulers() -> None:
    def binding(config: Config) -> dict | None:
        return next(
            (
                o
                for o in admission_policy_objects(config)
                if o["kind"] == "ValidatingAdmissionPolicyBinding"
                and o["metadata"]["name"] == POLICY_NAME
            ),
            None,
        )

    enforced = binding(CONFIG)
    assert enforced is not None and enforced["spec"]["validationActions"] == ["Deny"]
    audit = Config.model_validate({"policies": {"gpu-env-guard": {"mode": "audit"}}})
    assert binding(audit)["spec"]["validationActions"] == ["Audit"]  # type: ignore[index]
    none = Config.model_validate({"gpu": {"schedulers": []}})
    assert binding(none) is None
    assert not refuses(None, _map("all"), "alice", none)
    writers = Config.model_validate(
        {
            "gpu": {
                "schedulers": [
                    {
                        "scheduler_name": "kai-scheduler",
                        "mark_annotations": ["gpu-fraction"],
                        "config_map_annotation": "runai/shared-gpu-configmap",
                        "config_map_writers": ["system:serviceaccount:kai:binder"],
                    }
                ]
            }
        }
    )
    assert not refuses(None, _map("GPU-1"), "system:serviceaccount:kai:binder", writers)
    assert refuses(None, _map("GPU-1"), BINDER, writers)


def test_older_servers_without_policies_have_no_guard() -> None:
    names = {o.obj["metadata"]["name"] for o in expected_objects(CONFIG, Layout.POD_CHECKS)}
    assert POLICY_NAME not in names
    names = {o.obj["metadata"]["name"] for o in expected_objects(CONFIG, Layout.POD_MUTATIONS)}
    assert POLICY_NAME in names
