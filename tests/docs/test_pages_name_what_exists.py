"""The pages name only what exists: every path under manifests/ that README.md and docs/ name is
in the repository, and every `gpu-admission` sub-command and flag their code names is one the
command line takes (so a reader who copies a command gets the command, not an error)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from commands.parser import build_parser
from tests import ROOT

PAGES = {
    p.relative_to(ROOT): p.read_text() for p in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]
}
# `gpu-admission` where a command starts (a line or span, after `$ `, `-- `, a pipe, `&&`), not
# the namespace, a Deployment or prose.
COMMAND = re.compile(r"(?:^\s*|\$ |-- |\| |; |&& )gpu-admission ((?:[a-z][a-z-]*)(?: [a-z]+)?)")
FLAG = re.compile(r"(?<![\w-])(--?[a-z][a-z-]*)")


def _code(markdown: str) -> list[str]:
    """Each line of code: fenced blocks' lines and inline code spans."""
    fenced = re.findall(r"^ *```[a-z]*\n(.*?)^ *```", markdown, re.S | re.M)
    prose = re.sub(r"^ *```[a-z]*\n.*?^ *```", "", markdown, flags=re.S | re.M)
    lines = [line for block in fenced for line in block.splitlines()]
    return lines + re.findall(r"`([^`\n]+)`", prose)


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def _command(words: list[str]) -> argparse.ArgumentParser | None:
    """The parser of `gpu-admission <words...>` (None: no such command)."""
    parser = build_parser()
    for depth, word in enumerate(words):
        try:
            choices = _subparsers(parser)
        except StopIteration:
            break  # a command without sub-commands: the rest are its arguments
        if word not in choices:
            return None if depth == 0 else parser
        parser = choices[word]
    return parser


@pytest.mark.parametrize("page", sorted(PAGES), ids=str)
def test_every_manifests_path_exists(page: Path) -> None:
    # The repository's manifests/, or as an install beside it names them (../gpu-admission/);
    # not examples/manifests/ or tests/manifests/.
    pattern = r"(?<![\w./-])(?:\.\./gpu-admission/)?(manifests/[A-Za-z0-9_./-]*[A-Za-z0-9_-])"
    named = set(re.findall(pattern, PAGES[page]))
    missing = sorted(p for p in named if not (ROOT / p).exists())
    assert missing == [], f"{page} names {missing}"


@pytest.mark.parametrize("page", sorted(PAGES), ids=str)
def test_every_command_and_flag_exists(page: Path) -> None:
    wrong = []
    for line in _code(PAGES[page]):
        for match in COMMAND.finditer(line):
            parser = _command(match[1].split())
            if parser is None:
                wrong.append(f"no command `gpu-admission {match[1].split()[0]}`: {line}")
                continue
            rest = line[match.start(1) :].split("|")[0].split(";")[0].split("&&")[0]
            known = {o for action in parser._actions for o in action.option_strings}
            flags = set(FLAG.findall(rest)) - {"-"}
            if flags - known:
                wrong.append(f"unknown {sorted(flags - known)}: {line}")
    assert wrong == [], f"{page}:\n" + "\n".join(wrong)


def test_the_pages_show_every_command() -> None:
    shown = {
        match[1].split()[0]
        for text in PAGES.values()
        for line in _code(text)
        for match in COMMAND.finditer(line)
    }
    assert shown == set(_subparsers(build_parser()))
