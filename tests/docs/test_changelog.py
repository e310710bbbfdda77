"""CHANGELOG.md names the version `gpu-admission --version` prints, the image's label and the
package carry (one number: gpu_admission/__init__.py), so a release is never cut without its
entry."""

from __future__ import annotations

import re

from gpu_admission import __version__
from tests import ROOT

CHANGELOG = (ROOT / "CHANGELOG.md").read_text()


def test_the_changelog_has_an_entry_for_this_version() -> None:
    versions = re.findall(r"^## (\d+\.\d+\.\d+)\b", CHANGELOG, re.M)
    assert __version__ in versions, f"CHANGELOG.md has no '## {__version__}' section"
