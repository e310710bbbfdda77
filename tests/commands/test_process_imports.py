"""Each long-running command imports its own stack, not the others': the command line is built
by every process, so what the parser imports, every process holds for its whole life."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests import ROOT

# What `gpu-admission <command>` imports: the entry point, the whole parser, then the modules
# the command's own function imports when it runs.
PROBE = """
import importlib, sys
import commands.cli, commands.parser
commands.parser.build_parser()
for name in sys.argv[1:]:
    importlib.import_module(name)
print(" ".join(sorted(sys.modules)))
"""

RUNS = {
    "controller": ["commands.controller", "gpu_admission.process.event_loop"],
    "serve": ["commands.serve", "certs.pem"],
}
NOT_IMPORTED = {
    # The certificate code (cryptography: 7.5 MiB) and the webhook server.
    "controller": ["cryptography", "certs.issue", "webhooks.service.server", "commands.serve"],
    # The dataset controller and its event loop.
    "serve": ["controllers.dataset.controller", "commands.controller", "uvloop"],
}


@pytest.mark.parametrize("command", sorted(RUNS))
def test_a_command_does_not_carry_the_other_commands_modules(command: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *RUNS[command]],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=True,
    )
    loaded = set(done.stdout.split())
    assert set(RUNS[command]) <= loaded
    assert [name for name in NOT_IMPORTED[command] if name in loaded] == []
