"""GPU_ADMISSION_* variables: the project's settings are read, the kubelet's service links are
passed over, and a misspelt setting is refused by name."""

from __future__ import annotations

import pytest

from gpu_admission.config.environ import is_service_link
from gpu_admission.config.model import ConfigError, load_config


def service_links(service: str, cluster_ip: str, ports: list[tuple[str, int]]) -> dict[str, str]:
    """What the kubelet sets for one Service (pkg/kubelet/envvars/envvars.go, FromServices)."""
    prefix = service.upper().replace("-", "_")
    host = f"[{cluster_ip}]" if ":" in cluster_ip else cluster_ip
    env = {f"{prefix}_SERVICE_HOST": cluster_ip, f"{prefix}_SERVICE_PORT": str(ports[0][1])}
    for name, port in ports:
        if name:
            env[f"{prefix}_SERVICE_PORT_{name.upper().replace('-', '_')}"] = str(port)
    env[f"{prefix}_PORT"] = f"tcp://{host}:{ports[0][1]}"
    for _, port in ports:
        base = f"{prefix}_PORT_{port}_TCP"
        env[base] = f"tcp://{host}:{port}"
        env[f"{base}_PROTO"] = "tcp"
        env[f"{base}_PORT"] = str(port)
        env[f"{base}_ADDR"] = cluster_ip
    return env


# manifests/base/service.yaml: the Service gpu-admission, ports https (443) and metrics (9090).
SHIPPED_SERVICE = service_links("gpu-admission", "10.96.14.7", [("https", 443), ("metrics", 9090)])


def test_the_shipped_services_links_are_not_settings():
    assert "GPU_ADMISSION_SERVICE_HOST" in SHIPPED_SERVICE
    assert "GPU_ADMISSION_PORT_443_TCP_ADDR" in SHIPPED_SERVICE
    config = load_config(environ=SHIPPED_SERVICE)
    assert config == load_config(environ={})


@pytest.mark.parametrize(
    "service, cluster_ip, ports",
    [
        ("gpu-admission", "fd00:10:96::a", [("https", 443), ("metrics", 9090)]),
        ("gpu-admission-controller", "10.0.0.9", [("", 9090)]),
        ("gpu-admission-server", "10.0.0.10", [("grpc-web", 8080), ("admin", 9000)]),
        ("gpu-admission-gpu", "10.0.0.11", [("", 53)]),
    ],
)
def test_links_of_any_gpu_admission_service_are_passed_over(service, cluster_ip, ports):
    links = service_links(service, cluster_ip, ports)
    settings = {"GPU_ADMISSION_SERVER__PORT": "10443"}
    config = load_config(environ={**links, **settings})
    assert config.server.port == 10443


def test_settings_are_read_beside_the_links():
    environ = {**SHIPPED_SERVICE, "GPU_ADMISSION_MEMORY_SHARE__HEADROOM": "0.9"}
    assert load_config(environ=environ).memory_share.headroom == 0.9


@pytest.mark.parametrize(
    "name, hint",
    [
        ("GPU_ADMISSION_MEMORY_SHAR__HEADROOM", "did you mean memory_share"),
        ("GPU_ADMISSION_ANOTATION_PREFIX", "did you mean annotation_prefix"),
        ("GPU_ADMISSION_QUUX", "the settings are"),
    ],
)
def test_a_misspelt_setting_is_refused_by_name(name, hint):
    with pytest.raises(ConfigError) as error:
        load_config(environ={**SHIPPED_SERVICE, name: "s3cr3t-value"})
    message = str(error.value)
    assert name in message and hint in message
    assert "environment variables" in message
    assert "s3cr3t-value" not in message  # a variable may hold a token


def test_a_link_shaped_name_with_a_settings_value_is_refused():
    # A port written as a Service link would be, but with a plain number: a setting meant for
    # server.metrics_port, not the kubelet's `tcp://<ip>:<port>`.
    with pytest.raises(ConfigError) as error:
        load_config(environ={"GPU_ADMISSION_METRICS_PORT": "9091"})
    assert "GPU_ADMISSION_METRICS_PORT" in str(error.value)


def test_a_misspelt_nested_key_names_its_field():
    with pytest.raises(ConfigError) as error:
        load_config(environ={**SHIPPED_SERVICE, "GPU_ADMISSION_SERVER__PROT": "1"})
    assert "server.prot" in str(error.value)


def test_a_value_that_is_not_yaml_is_named_not_echoed():
    with pytest.raises(ConfigError) as error:
        load_config(environ={"GPU_ADMISSION_GPU__RESOURCE_PATTERNS": "[tok3n-abc"})
    message = str(error.value)
    assert "GPU_ADMISSION_GPU__RESOURCE_PATTERNS" in message and "tok3n-abc" not in message


def test_a_section_set_as_a_value_is_refused():
    environ = {"GPU_ADMISSION_SERVER": "1", "GPU_ADMISSION_SERVER__PORT": "9443"}
    with pytest.raises(ConfigError) as error:
        load_config(environ=environ)
    assert "GPU_ADMISSION_SERVER__PORT" in str(error.value)


@pytest.mark.parametrize(
    "name, value, expected",
    [
        ("GPU_ADMISSION_SERVICE_HOST", "10.96.0.5", True),
        ("GPU_ADMISSION_SERVICE_HOST", "gpu-admission.svc", False),
        ("GPU_ADMISSION_PORT", "tcp://10.96.0.5:443", True),
        ("GPU_ADMISSION_PORT", "tcp://[fd00::5]:443", True),
        ("GPU_ADMISSION_PORT", "443", False),
        ("GPU_ADMISSION_PORT_443_UDP_PROTO", "udp", True),
        ("GPU_ADMISSION_PORT_443_TCP_PORT", "443", True),
        ("GPU_ADMISSION_PORT_443_TCP_PORT", "port", False),
        ("GPU_ADMISSION_X_SERVICE_PORT_HTTPS", "443", True),
    ],
)
def test_the_service_link_shape(name, value, expected):
    assert is_service_link(name, value) is expected
