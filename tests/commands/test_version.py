"""`gpu-admission --version`: the installed package's version, which is gpu_admission's."""

from __future__ import annotations

from importlib import metadata

import pytest

from commands import parser
from gpu_admission import __version__


def test_version_is_the_installed_package_version(capsys) -> None:
    with pytest.raises(SystemExit) as done:
        parser.build_parser().parse_args(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"gpu-admission {metadata.version('gpu-admission')}"
    assert metadata.version("gpu-admission") == __version__
