"""`make test`'s test run: the install tier (a real node: minutes of pods starting, loads
running, rollouts) in one pytest process, and every other test in a second one beside it, so the
machine's cores work while the node's pods start. Each has a temporary folder of its own; the
rest's output streams, the install tier's follows it; the exit status is the worse of the two.
Arguments are passed to both (`make test PYTEST_ARGS=-x`)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
INSTALL_TIER = "tests/install"


def main(argv: list[str]) -> int:
    base = Path(tempfile.mkdtemp(prefix="gpu-admission-tests-"))
    pytest = [sys.executable, "-m", "pytest", "-q", *argv]
    with open(base / "install-tier.log", "wb") as log:
        install = subprocess.Popen(
            [*pytest, "--basetemp", str(base / "install"), INSTALL_TIER],
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            rest = subprocess.run(
                [*pytest, "--basetemp", str(base / "rest"), "--ignore", INSTALL_TIER],
                cwd=ROOT,
                check=False,
            ).returncode
        finally:
            installed = install.wait()
    print(f"\n--- the install tier ({INSTALL_TIER}), run beside the rest ---", flush=True)
    sys.stdout.buffer.write((base / "install-tier.log").read_bytes())
    sys.stdout.flush()
    if rest == installed == 0:
        shutil.rmtree(base, ignore_errors=True)  # kept for a look after a failure
    return max(rest, installed)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
