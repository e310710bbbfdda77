"""The configuration from a folder of layers, as a mounted ConfigMap gives it: the shipped
config first, the components' layers in name order, the user's settings last, each merged over
the ones before mapping by mapping."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_admission.config.files import layer_paths
from gpu_admission.config.model import ConfigError, load_config
from tests import ROOT


def _folder(tmp_path: Path, **files: str) -> Path:
    folder = tmp_path / "config"
    folder.mkdir()
    for name, text in files.items():
        (folder / name.replace("_", "-").replace("-yaml", ".yaml")).write_text(text)
    return folder


def test_the_shipped_config_comes_first_the_users_settings_last(tmp_path: Path) -> None:
    folder = _folder(
        tmp_path,
        settings_yaml="audit:\n  interval: 30m\n",
        config_yaml="audit:\n  interval: 0\n  max_results_per_report: 7\n",
        policy_reports_yaml="audit:\n  interval: 10m\n",
        audit_mode_yaml="policies:\n  gpu-env-guard: {mode: warn}\n",
    )
    assert [p.name for p in layer_paths(folder)] == [
        "config.yaml",
        "audit-mode.yaml",
        "policy-reports.yaml",
        "settings.yaml",
    ]
    config = load_config(folder, environ={})
    assert config.audit.interval == 1800  # the user's, over the component's
    assert config.audit.max_results_per_report == 7  # the shipped one, kept
    assert config.mode_of("gpu-env-guard") == "warn"


def test_a_mounted_configmaps_hidden_entries_are_not_layers(tmp_path: Path) -> None:
    # The kubelet's layout: the keys are links into ..data, a link to a hidden timestamped folder.
    folder = tmp_path / "mounted"
    stamp = folder / "..2026_11_28_12_00_00.000000001"
    stamp.mkdir(parents=True)
    (stamp / "config.yaml").write_text("leader_election:\n  namespace: ml\n")
    (stamp / "broken.yaml").write_text("- not a mapping\n")
    (folder / "..data").symlink_to(stamp.name)
    (folder / "config.yaml").symlink_to("..data/config.yaml")
    assert [p.name for p in layer_paths(folder)] == ["config.yaml"]
    assert load_config(folder, environ={}).leader_election.namespace == "ml"


def test_a_bad_key_names_the_layer_that_set_it(tmp_path: Path) -> None:
    folder = _folder(
        tmp_path, config_yaml="audit:\n  interval: 0\n", settings_yaml="audit:\n  intervall: 5m\n"
    )
    with pytest.raises(ConfigError) as raised:
        load_config(folder, environ={})
    message = str(raised.value)
    assert "audit.intervall" in message
    assert f"(set in {folder / 'settings.yaml'})" in message


def test_a_bad_value_from_the_environment_names_the_environment(tmp_path: Path) -> None:
    folder = _folder(tmp_path, config_yaml="audit:\n  interval: 5m\n")
    with pytest.raises(ConfigError, match="set in GPU_ADMISSION_"):
        load_config(folder, environ={"GPU_ADMISSION_AUDIT__INTERVAL": "-3"})


def test_a_layer_that_is_not_a_mapping_is_named(tmp_path: Path) -> None:
    folder = _folder(tmp_path, config_yaml="{}\n", settings_yaml="- mode: warn\n")
    with pytest.raises(ConfigError, match=r"settings\.yaml must hold a mapping"):
        load_config(folder, environ={})


def test_an_empty_folder_is_an_error_not_the_defaults(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="holds no"):
        load_config(_folder(tmp_path), environ={})


def test_an_unknown_component_is_named_with_the_known_ones(tmp_path: Path) -> None:
    folder = _folder(tmp_path, config_yaml="install:\n  components:\n    auditmode: true\n")
    with pytest.raises(ConfigError, match="unknown component auditmode: the components are"):
        load_config(folder, environ={})


def test_one_file_is_read_as_before(tmp_path: Path) -> None:
    path = tmp_path / "anything.yaml"
    path.write_text("leader_election:\n  namespace: ml\n")
    (tmp_path / "settings.yaml").write_text("leader_election:\n  namespace: other\n")
    assert load_config(path, environ={}).leader_election.namespace == "ml"


def test_the_project_namespace_is_the_pods_unless_a_layer_names_one(tmp_path: Path) -> None:
    """A kustomization's `namespace:` reaches the programs as their POD_NAMESPACE: the Service's
    and the Lease's namespace follow it; a file or a variable that names one still wins."""
    pod = {"POD_NAMESPACE": "ml-platform"}
    shipped = load_config(ROOT / "manifests/base/config.yaml", environ=pod)
    assert (shipped.certs.namespace, shipped.leader_election.namespace) == (
        "ml-platform",
        "ml-platform",
    )
    outside = load_config(ROOT / "manifests/base/config.yaml", environ={})
    assert outside.certs.namespace == "gpu-admission"
    folder = _folder(tmp_path, config_yaml="certs:\n  namespace: gpu-system\n")
    assert load_config(folder, environ=pod).certs.namespace == "gpu-system"
    variable = {**pod, "GPU_ADMISSION_LEADER_ELECTION__NAMESPACE": "leases"}
    assert load_config(folder, environ=variable).leader_election.namespace == "leases"
