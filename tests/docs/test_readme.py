"""The README and the docs promise only what the code does: the README is a front page of at most
16,000 bytes, the configuration reference is generated from the model and has not drifted, the
commands and flags exist, and the names, metrics and messages quoted are the real ones."""

from __future__ import annotations

import argparse
import io
import re
import subprocess
import sys
import tempfile
from functools import cached_property
from pathlib import Path

import pytest
import yaml
from kubernetes.client import ApiClient

from commands.controller import ControllerProcess
from commands.parser import build_parser
from commands.review import review_command
from commands.serve import AdmissionServer
from gpu_admission.config.model import Config
from gpu_admission.config.reference import missing_descriptions, render
from gpu_admission.names import DEFAULT_PREFIX, Names
from gpu_admission.process.metrics import AdmissionMetrics, Metrics
from tests import ROOT
from tests.support.markdown import code_blocks
from tests.world.harness import KUBECTL, installed_config

README = (ROOT / "README.md").read_text()
DOCS = {path.name: path.read_text() for path in sorted((ROOT / "docs").glob("*.md"))}
EVERYTHING = "\n".join([README, *DOCS.values()])
README_LIMIT_BYTES = 16_000
COMMANDS = (
    "make run    # set up, then review examples/manifests against examples/cluster-state.yaml",
    "make test   # set up, then lint and run the whole test suite",
)
# Objects of examples/manifests whose denial the README quotes word for word.
QUOTED_DENIALS = (
    "Pod ml/sees-all-gpus",
    "Pod ml/notebook-shared-2",
    "Pod ml/notebook-time-sliced-2",
    "Pod ml/wrong-credential",
    "Secret ml/s3-typo",
    "PersistentVolumeClaim ml/bad-source",
    "PersistentVolumeClaim ml/wrong-credential-type",
    "PersistentVolumeClaim ml/shards-on-rwo",
    "Pod ml/pinned-eval",
    "PersistentVolumeClaim ml/http-mirror",
    "PersistentVolumeClaim ml/hub-typo",
    "Secret ml/blob-mixed",
    "Deployment ml/notebook",
)


def section(markdown: str, heading: str) -> str:
    """The text under a `## heading`, up to the next heading of the same level."""
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", markdown, re.S | re.M)
    assert match, f"no '## {heading}' section"
    return match[1]


def squeeze(text: str) -> str:
    return " ".join(text.split())


def test_the_readme_is_a_front_page() -> None:
    size = len(README.encode())
    assert size <= README_LIMIT_BYTES, f"README.md is {size} bytes; move the manual into docs/"
    for document in DOCS:
        if document != "DESIGN.md":
            assert f"docs/{document}" in README, f"the README does not link docs/{document}"


def test_the_configuration_reference_is_generated_from_the_model() -> None:
    assert DOCS["configuration.md"] == render(), (
        "docs/configuration.md drifted from the configuration model; regenerate it with "
        "python -m gpu_admission.config.reference > docs/configuration.md"
    )
    assert missing_descriptions() == [], (
        "every key needs a docstring in gpu_admission/config/model.py"
    )
    blocks = code_blocks(DOCS["configuration.md"], "yaml")
    assert yaml.safe_load(blocks[-1]) == Config().model_dump(mode="json")
    keys = set(re.findall(r"^\| `([a-z_.]+)` \|", DOCS["configuration.md"], re.M))
    assert {"dataset.load_stuck_after_seconds", "server.port", "gpu.dra.drivers"} <= keys


def test_both_commands_appear_verbatim_and_are_make_targets():
    for command in COMMANDS:
        assert command in README
    makefile = (ROOT / "Makefile").read_text()
    for target in ("run", "test", "bench", "lint", "format"):
        assert re.search(rf"^{target}:", makefile, re.M), f"make {target} is not a target"
        assert f"make {target}" in README


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def _synopsis() -> dict[tuple[str, ...], set[str]]:
    """Each `gpu-admission <command> ...` of the command-line block and the flags it shows."""
    block = code_blocks(section(DOCS["operations.md"], "The command line"), "")[0]
    commands: dict[tuple[str, ...], set[str]] = {}
    current: tuple[str, ...] = ()
    for line in block.splitlines():
        if line.startswith("gpu-admission "):
            words = line.split()
            current = tuple(w for w in words[1:3] if re.fullmatch(r"[a-z][a-z-]*", w))
            commands[current] = set()
        commands[current] |= set(re.findall(r"(?<![\w-])(--?[a-z][a-z-]*)", line))
    return commands


def test_every_flag_in_the_synopsis_exists():
    synopsis = _synopsis()
    assert set(synopsis) == {
        ("serve",),
        ("controller",),
        ("review",),
        ("audit",),
        ("admission-policy",),
        ("certs", "issue"),
        ("load",),
        ("gpu-usage",),
        ("usage",),
    }
    for words, flags in synopsis.items():
        parser = build_parser()
        for word in words:
            parser = _subparsers(parser)[word]
        known = {option for action in parser._actions for option in action.option_strings}
        assert flags <= known, f"gpu-admission {' '.join(words)}: unknown {flags - known}"


def test_every_prefixed_name_in_the_docs_is_a_real_one():
    names = Names(DEFAULT_PREFIX)
    real = {
        getattr(names, attribute)
        for attribute in dir(Names)
        if isinstance(getattr(Names, attribute), property | cached_property)
    }
    for name, text in {"README.md": README, **DOCS}.items():
        # Not the audit annotations `<webhook name>/<policy>` (pods.mutate.gpu-admission.io/...).
        used = set(re.findall(r"(?<![\w.])gpu-admission\.io/[a-z0-9-]*[a-z0-9]", text))
        assert used <= real, f"{name} names {sorted(used - real)}, which the code never uses"


def test_every_metric_in_the_monitoring_doc_is_exported_and_every_export_documented():
    offline = Config.model_validate({"certs": {"cert_dir": "/nonexistent"}})  # never started
    serve = AdmissionServer(offline, None, metrics=Metrics(process_metrics=False))
    AdmissionMetrics(serve.metrics)
    # Its leader election's metrics too: made with the controller.
    controller = ControllerProcess(Config(), ApiClient(), Metrics(process_metrics=False))
    exported = set()
    for metrics in (serve.metrics, controller.metrics):
        exported |= set(re.findall(r"^# TYPE (\S+)", metrics.exposition().decode(), re.M))
    documented = set(
        re.findall(r"`(gpu_admission_[a-z_]+)`", section(DOCS["monitoring.md"], "Metrics"))
    )
    assert documented == exported


@pytest.fixture(scope="module")
def example_denials() -> dict[str, str]:
    """`make run`, in process: the denial message of each example object."""
    args = build_parser().parse_args(
        [
            "review",
            "-f",
            str(ROOT / "examples/manifests"),
            "--cluster-state",
            str(ROOT / "examples/cluster-state.yaml"),
        ]
    )
    err = io.StringIO()
    assert review_command(args, io.StringIO(), err) == 1
    denials, subject = {}, ""
    for line in err.getvalue().splitlines():
        if not line.startswith(" "):
            subject = line.split(" (", 1)[0]
        elif line.startswith("  denied: "):
            denials[subject] = line.removeprefix("  denied: ")
    return denials


@pytest.mark.parametrize("subject", QUOTED_DENIALS)
def test_quoted_denials_are_the_real_messages(example_denials, subject):
    assert subject in example_denials, f"{subject} is no longer denied by the examples"
    assert squeeze(example_denials[subject]) in squeeze(EVERYTHING)


def test_the_reference_command_prints_the_document() -> None:
    printed = subprocess.run(
        [sys.executable, "-m", "gpu_admission.config.reference"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    ).stdout
    assert printed == DOCS["configuration.md"]


def test_every_kustomization_the_docs_apply_renders() -> None:
    """The repository's own render here; the user's own (my-install/) is rendered from the
    pages' example blocks below."""
    applied = set(re.findall(r"kubectl apply -k (\S+)", EVERYTHING))
    assert "my-install/" in applied
    applied = {path for path in applied if (ROOT / path).is_dir()}
    for path in sorted(applied):
        subprocess.run([KUBECTL, "kustomize", str(ROOT / path)], check=True, capture_output=True)


def _rendered_examples() -> list[tuple[str, tuple[dict, ...]]]:
    """Every `# my-install/kustomization.yaml` block of README.md and docs/ (with the
    settings.yaml its page shows), rendered beside this repository as the pages lay it out."""
    rendered = []
    for name, text in {"README.md": README, **DOCS}.items():
        settings = [b for b in code_blocks(text, "yaml") if b.startswith("# my-install/settings")]
        for block in code_blocks(text, "yaml"):
            if not block.startswith("# my-install/kustomization.yaml"):
                continue
            with tempfile.TemporaryDirectory() as folder:
                (Path(folder) / "gpu-admission").symlink_to(ROOT)
                mine = Path(folder) / "my-install"
                mine.mkdir()
                (mine / "kustomization.yaml").write_text(block)
                (mine / "settings.yaml").write_text(settings[0] if settings else "{}\n")
                out = subprocess.run(
                    [KUBECTL, "kustomize", str(mine)], check=True, capture_output=True, text=True
                ).stdout
            rendered.append((name, tuple(d for d in yaml.safe_load_all(out) if d)))
    return rendered


def test_every_example_kustomization_renders_with_the_pushed_image(tmp_path: Path) -> None:
    pushed = "registry.example.com/ml/gpu-admission:0.1.0"
    examples = _rendered_examples()
    assert {name for name, _ in examples} >= {"README.md", "install.md", "image.md", "adoption.md"}
    for name, docs in examples:
        images = {
            c["image"]
            for d in docs
            if d["kind"] in ("Deployment", "DaemonSet")
            for c in d["spec"]["template"]["spec"]["containers"]
        }
        assert images == {pushed}, name
        config = installed_config(docs, tmp_path / name.replace(".", "-"))
        assert config.dataset.loader_image is None, name  # the controller's own image
        assert config.certs.secret_name == "gpu-admission-tls", name
