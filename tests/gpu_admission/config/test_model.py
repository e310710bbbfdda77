"""One config model from a YAML file, GPU_ADMISSION_* variables and flags; errors name the field."""

from __future__ import annotations

import pytest

from gpu_admission.config.model import Config, ConfigError, FailureMode, load_config


def test_defaults_are_the_documented_ones():
    config = load_config(environ={})
    assert config.server.port == 8443 and config.server.metrics_port == 9090
    assert config.server.max_body_bytes == 3 * 1024 * 1024
    assert config.gpu.resource_patterns == [
        "nvidia.com/gpu",
        "nvidia.com/gpu.shared",
        "nvidia.com/mig-*",
    ]
    assert config.memory_share.headroom == 0.95
    assert config.credentials.informer_wait_seconds == 0.2
    assert config.exempt_label == "gpu-admission.io/exempt"
    assert config.failure_mode("/mutate/pods") is FailureMode.DENY


def test_file_then_environment_then_flags(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("server:\n  port: 9443\n  metrics_port: 9191\nmemory_share:\n  headroom: 0.9\n")
    environ = {"GPU_ADMISSION_SERVER__PORT": "10443", "GPU_ADMISSION_GPU__SHARED_SUFFIXES": "[.s]"}
    config = load_config(path, {"server": {"metrics_port": 9292}}, environ=environ)
    assert config.server.port == 10443  # the environment beats the file
    assert config.server.metrics_port == 9292  # a flag beats both
    assert config.memory_share.headroom == 0.9  # the file, where nothing overrides it
    assert config.gpu.shared_suffixes == [".s"]


def test_prefix_changes_every_name():
    config = Config(annotation_prefix="gpus.example.com/")
    assert config.names.cloud_credentials == "gpus.example.com/cloud-credentials"
    assert config.exempt_label == "gpus.example.com/exempt"


@pytest.mark.parametrize(
    "environ, field",
    [
        ({"GPU_ADMISSION_SERVER__PORT": "70000"}, "server.port"),
        ({"GPU_ADMISSION_MEMORY_SHARE__HEADROOM": "1.5"}, "memory_share.headroom"),
        ({"GPU_ADMISSION_ANNOTATION_PREFIX": "Not A Prefix"}, "annotation_prefix"),
        ({"GPU_ADMISSION_SERVER__FAILURE_MODES": "{/mutate/pods: maybe}"}, "failure_modes"),
        ({"GPU_ADMISSION_GPU__RESOURCE_PATTERNS": "[]"}, "gpu.resource_patterns"),
        ({"GPU_ADMISSION_SERVER__PROT": "1"}, "server.prot"),
    ],
)
def test_a_bad_value_names_its_field(environ, field):
    with pytest.raises(ConfigError) as error:
        load_config(environ=environ)
    assert field in str(error.value)
    assert "environment variables" in str(error.value)


def test_custom_profile_templates_are_checked():
    with pytest.raises(ConfigError) as error:
        load_config(
            None,
            {"memory_share": {"profiles": {"vllm": {"VLLM_MEM": "{fraction}/{gpus}"}}}},
            environ={},
        )
    assert "unknown template field {gpus}" in str(error.value)
    assert "memory_share.profiles" in str(error.value)


@pytest.mark.parametrize(
    "content, message",
    [
        ("server: [unclosed", "is not valid YAML"),
        ("- a list", "must hold a mapping"),
    ],
)
def test_unusable_files_are_reported(tmp_path, content, message):
    path = tmp_path / "config.yaml"
    path.write_text(content)
    with pytest.raises(ConfigError) as error:
        load_config(path, environ={})
    assert message in str(error.value) and str(path) in str(error.value)


def test_a_missing_file_is_reported(tmp_path):
    with pytest.raises(ConfigError) as error:
        load_config(tmp_path / "absent.yaml", environ={})
    assert "cannot read config file" in str(error.value)


def test_idle_settings_take_durations_and_a_prometheus_url() -> None:
    from gpu_admission.config.idle import IdleConfig

    idle = IdleConfig.model_validate(
        {"prometheus_url": "http://prometheus-operated.monitoring:9090/", "grace": "10m"}
    )
    assert (idle.prometheus_url, idle.grace, idle.interval) == (
        "http://prometheus-operated.monitoring:9090",
        600,
        60,
    )
    assert IdleConfig().prometheus_url is None  # off unless the component or the user sets it
    for bad in ({"prometheus_url": "prometheus:9090"}, {"grace": "soon"}, {"interval": 0}):
        with pytest.raises(ValueError):
            IdleConfig.model_validate(bad)
