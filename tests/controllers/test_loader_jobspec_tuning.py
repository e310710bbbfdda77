"""What a loader Job fixes of how its loader copies: only what the configuration sets, and the
container's own memory limit through the Downward API; the rest the loader chooses."""

from __future__ import annotations

from gpu_admission.config.model import Config
from tests.controllers.test_loader_jobspec_sources import container, env, job


def command_of(source: str, **dataset: object) -> list[str]:
    config = Config.model_validate({"dataset": dataset})
    return container(job(source, config=config))["command"]


def test_by_default_the_loader_chooses_from_its_listing() -> None:
    command = command_of("s3://bucket/train")
    for flag in ("--transfers", "--checkers", "--multi-thread-streams", "--no-fast-list"):
        assert flag not in command
    assert "--no-verify" not in command


def test_the_configured_settings_reach_the_loader() -> None:
    command = command_of(
        "gs://bucket/train",
        transfers=32,
        checkers=48,
        multi_thread_streams=8,
        fast_list=False,
        verify_checksums=False,
    )
    assert command[command.index("--transfers") + 1] == "32"
    assert command[command.index("--checkers") + 1] == "48"
    assert command[command.index("--multi-thread-streams") + 1] == "8"
    assert "--no-fast-list" in command and "--no-verify" in command


def test_a_hub_load_takes_only_the_number_of_download_threads() -> None:
    command = command_of("hf://org/model", transfers=12, checkers=48, verify_checksums=False)
    assert command[command.index("--transfers") + 1] == "12"
    assert "--checkers" not in command and "--no-verify" not in command


def test_the_loader_is_told_its_own_memory_limit() -> None:
    body = job("s3://bucket/train")
    reference = {"containerName": container(body)["name"], "resource": "limits.memory"}
    assert env(body)["LOADER_MEMORY_LIMIT"] == {"resourceFieldRef": reference}
