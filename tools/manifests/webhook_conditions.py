"""Rewrites the matchConditions' CEL in manifests/base/webhooks.yaml from the project's own
generator (`webhook_configurations` for the default configuration), leaving the file's comments
and layout as they are: each `expression: >-` block of a webhook's condition is replaced by the
generated expression, folded at the file's width.

    .venv/bin/python tools/manifests/webhook_conditions.py          # rewrite the conditions
    .venv/bin/python tools/manifests/webhook_conditions.py --check  # exit 1 if one is stale

The tests that hold the file to the generator (tests/webhooks/apiserver_policies/
test_pod_checks.py, test_webhook_routing.py) name this command when they fail.
"""

from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from gpu_admission.config.model import Config  # noqa: E402
from webhooks.apiserver_policies.webhook_configurations import webhook_configurations  # noqa: E402

WEBHOOKS = ROOT / "manifests" / "base" / "webhooks.yaml"
WIDTH = 100
_WEBHOOK = re.compile(r"^  - name: (\S+)$")
_CONDITION = re.compile(r"^\s+- name: (\S+)$")
_EXPRESSION = re.compile(r"^(\s+)expression: >-$")


def generated() -> dict[tuple[str, str], str]:
    """(webhook, condition) -> its CEL, for the default configuration."""
    return {
        (hook["name"], condition["name"]): condition["expression"]
        for configuration in webhook_configurations(Config())
        for hook in configuration["webhooks"]
        for condition in hook.get("matchConditions") or ()
    }


def _folded(expression: str, indent: str) -> list[str]:
    text = " ".join(expression.split())  # a folded scalar joins its lines with single spaces
    lines = textwrap.wrap(
        text,
        width=WIDTH,
        initial_indent=indent,
        subsequent_indent=indent,
        break_long_words=False,
        break_on_hyphens=False,
    )
    return [line + "\n" for line in lines]


def rewritten(text: str, wanted: dict[tuple[str, str], str]) -> str:
    out: list[str] = []
    lines = text.splitlines(keepends=True)
    webhook = condition = ""
    i = 0
    while i < len(lines):
        line = lines[i]
        if match := _WEBHOOK.match(line.rstrip("\n")):
            webhook = match.group(1)
        elif match := _CONDITION.match(line.rstrip("\n")):
            condition = match.group(1)
        out.append(line)
        i += 1
        expression = _EXPRESSION.match(line.rstrip("\n"))
        if expression is None or (webhook, condition) not in wanted:
            continue
        indent = expression.group(1) + "  "
        while i < len(lines) and lines[i].startswith(indent):
            i += 1  # the old folded block
        out += _folded(wanted[(webhook, condition)], indent)
    return "".join(out)


def main(argv: list[str]) -> int:
    text = WEBHOOKS.read_text()
    new = rewritten(text, generated())
    if "--check" in argv:
        if new != text:
            print(f"{WEBHOOKS} is not current: run tools/manifests/webhook_conditions.py")
            return 1
        return 0
    WEBHOOKS.write_text(new)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
