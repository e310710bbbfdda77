"""`make dist`: the wheel an operator installs on a laptop holds the `gpu-admission` command,
every package it imports, and the license the project declares."""

from __future__ import annotations

import subprocess
import zipfile

import pytest

from gpu_admission import __version__
from tests import ROOT

pytestmark = pytest.mark.e2e


def test_make_dist_builds_a_wheel_of_the_command() -> None:
    done = subprocess.run(
        ["make", "--no-print-directory", "dist"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    wheel = ROOT / "dist" / f"gpu_admission-{__version__}-py3-none-any.whl"
    assert str(wheel.relative_to(ROOT)) in done.stdout
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        info = f"gpu_admission-{__version__}.dist-info"
        entry_points = archive.read(f"{info}/entry_points.txt").decode()
        license_text = archive.read(f"{info}/licenses/LICENSE").decode()
    assert "gpu-admission = commands.cli:main" in entry_points
    for package in ("gpu_admission", "webhooks", "controllers", "certs", "loaders", "gpu_usage"):
        assert f"{package}/__init__.py" in names, package
    assert "commands/audit.py" in names and "webhooks/audit/cluster.py" in names
    assert not any(n.startswith("tests/") for n in names)
    assert "Apache License" in license_text and "Version 2.0" in license_text
    assert (ROOT / "LICENSE").read_text() == license_text
