"""Policy modes in the configuration: names, allowed modes, environment spelling."""

from __future__ import annotations

import pytest

from gpu_admission.config.model import ConfigError, load_config
from gpu_admission.config.policy_modes import (
    MUTATING_POLICIES,
    TUNABLE_POLICIES,
    VALIDATING_POLICIES,
    PolicyMode,
    family,
)


def test_every_policy_enforces_by_default():
    config = load_config(environ={})
    assert config.relaxed_modes() == {}
    assert all(config.mode_of(name) is PolicyMode.ENFORCE for name in TUNABLE_POLICIES)


def test_a_variant_follows_its_policy():
    config = load_config(
        overrides={
            "policies": {"gpu-env-guard": {"mode": "warn"}, "gpu-visibility": {"mode": "audit"}}
        },
        environ={},
    )
    assert config.mode_of("gpu-env-guard-ephemeral") is PolicyMode.WARN
    assert config.mode_of("gpu-visibility-ephemeral") is PolicyMode.AUDIT
    assert family("dataset-read-only-ephemeral") == "dataset-gate"
    assert config.relaxed_modes() == {
        "gpu-env-guard": PolicyMode.WARN,
        "gpu-visibility": PolicyMode.AUDIT,
        "gpu-env-guard-ephemeral": PolicyMode.WARN,
        "gpu-visibility-ephemeral": PolicyMode.AUDIT,
    }


def test_environment_variables_spell_policy_names_with_underscores():
    config = load_config(environ={"GPU_ADMISSION_POLICIES__SHARED_GPU_LIMIT__MODE": "audit"})
    assert config.mode_of("shared-gpu-limit") is PolicyMode.AUDIT


def test_an_unknown_policy_is_refused_with_the_names_that_exist():
    with pytest.raises(ConfigError) as error:
        load_config(overrides={"policies": {"gpu-visibilty": {"mode": "audit"}}}, environ={})
    text = str(error.value)
    assert "unknown policy gpu-visibilty" in text
    assert all(name in text for name in TUNABLE_POLICIES)


@pytest.mark.parametrize("name", MUTATING_POLICIES)
def test_a_mutating_policy_cannot_warn(name):
    with pytest.raises(ConfigError, match=f"policies.{name}.mode: {name} changes objects"):
        load_config(overrides={"policies": {name: {"mode": "warn"}}}, environ={})


@pytest.mark.parametrize("name", VALIDATING_POLICIES)
@pytest.mark.parametrize("mode", list(PolicyMode))
def test_a_validating_policy_takes_every_mode(name, mode):
    config = load_config(overrides={"policies": {name: {"mode": str(mode)}}}, environ={})
    assert config.mode_of(name) is mode


def test_a_bad_mode_names_the_field():
    with pytest.raises(ConfigError, match=r"policies\.dataset-pvc\.mode"):
        load_config(overrides={"policies": {"dataset-pvc": {"mode": "dryrun"}}}, environ={})
