"""The README promises only what the code does: its configuration reference is the model's defaults,
its commands and flags exist, and the names, metrics and messages it quotes are the real ones."""

from __future__ import annotations

import argparse
import io
import re

import pytest
import yaml

from commands.parser import build_parser
from commands.review import review_command
from controllers.dataset.metrics import DatasetMetrics
from controllers.leader import LeaderMetrics
from gpu_admission.config import Config
from gpu_admission.metrics import AdmissionMetrics, Metrics
from gpu_admission.names import DEFAULT_PREFIX, Names
from tests import ROOT

README = (ROOT / "README.md").read_text()
DOCS = {path.name: path.read_text() for path in sorted((ROOT / "docs").glob("*.md"))}
COMMANDS = (
    "make run    # set up, then review examples/manifests against examples/cluster-state.yaml",
    "make test   # set up, then lint and run the whole test suite",
)
# Objects of examples/manifests whose denial the README quotes word for word.
QUOTED_DENIALS = (
    "Pod ml/sees-all-gpus",
    "Pod ml/notebook-shared-2",
    "Pod ml/wrong-credential",
    "Secret ml/s3-typo",
    "PersistentVolumeClaim ml/bad-source",
    "PersistentVolumeClaim ml/wrong-credential-type",
    "PersistentVolumeClaim ml/shards-on-rwo",
    "Pod ml/pinned-eval",
)


def section(markdown: str, heading: str) -> str:
    """The text under a `## heading`, up to the next heading of the same level."""
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", markdown, re.S | re.M)
    assert match, f"README.md has no '## {heading}' section"
    return match[1]


def code_blocks(markdown: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", markdown, re.S | re.M)


def squeeze(text: str) -> str:
    return " ".join(text.split())


def test_configuration_reference_is_the_models_defaults():
    blocks = code_blocks(section(README, "Configuration"), "yaml")
    assert len(blocks) == 1, "the Configuration section must hold exactly one yaml block"
    assert yaml.safe_load(blocks[0]) == Config().model_dump(mode="json")


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
    block = code_blocks(section(README, "The command line"), "")[0]
    commands: dict[tuple[str, ...], set[str]] = {}
    current: tuple[str, ...] = ()
    for line in block.splitlines():
        if line.startswith("gpu-admission "):
            words = line.split()
            current = tuple(w for w in words[1:3] if re.fullmatch(r"[a-z]+", w))
            commands[current] = set()
        commands[current] |= set(re.findall(r"(?<![\w-])(--?[a-z][a-z-]*)", line))
    return commands


def test_every_flag_in_the_synopsis_exists():
    synopsis = _synopsis()
    assert set(synopsis) == {
        ("serve",),
        ("controller",),
        ("review",),
        ("certs", "issue"),
        ("load",),
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
        if isinstance(getattr(Names, attribute), property)
    }
    for name, text in {"README.md": README, **DOCS}.items():
        used = set(re.findall(r"gpu-admission\.io/[a-z0-9-]*[a-z0-9]", text))
        assert used <= real, f"{name} names {sorted(used - real)}, which the code never uses"


def test_every_metric_in_the_readme_is_exported():
    metrics = Metrics(process_metrics=False)
    AdmissionMetrics(metrics)
    DatasetMetrics(metrics)
    LeaderMetrics(metrics)
    exported = set(re.findall(r"^# TYPE (\S+)", metrics.exposition().decode(), re.M))
    documented = set(re.findall(r"`(gpu_admission_[a-z_]+)`", README))
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
    assert squeeze(example_denials[subject]) in squeeze(README)
