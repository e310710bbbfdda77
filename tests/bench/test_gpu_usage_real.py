"""The GPU probe's parts that run anywhere: it says plainly that there is no GPU, it reads
`nvidia-smi pmon` as nvidia-smi prints it, and its table shows what it measured (the runs need a
GPU: bench/gpu_usage_real.py)."""

from __future__ import annotations

import pytest

from bench import gpu_usage_real
from bench.gpu_usage_real import Costs, ProcessFigures, ScenarioFigures

# nvidia-smi pmon -s u, as driver 580's prints it: one header pair, then a line per process and
# second ('-' where a figure is not sampled).
PMON = """\
# gpu         pid   type     sm    mem    enc    dec    jpg    ofa    command
# Idx           #    C/G      %      %      %      %      %      %    name
    0      41234     C     99      3      -      -      -      -    python
    0      41235     C      -      -      -      -      -      -    python
    1      41299     C     50      1      -      -      -      -    python
    0      41234     C     97      2      -      -      -      -    python
"""


def test_without_a_gpu_it_says_so_and_stops(capsys: pytest.CaptureFixture[str]) -> None:
    try:
        gpu_usage_real._nvml().nvmlShutdown()
    except gpu_usage_real.NoGpu:
        pass
    else:
        pytest.skip("a GPU is here: the probe would measure it")
    assert gpu_usage_real.main(["--seconds", "1"]) == gpu_usage_real.EXIT_NO_GPU
    assert "no GPU to measure" in capsys.readouterr().err


def test_pmon_is_read_per_process_on_the_device() -> None:
    assert gpu_usage_real.pmon_sm(PMON, 0) == {41234: [99.0, 97.0]}
    assert gpu_usage_real.pmon_sm(PMON, 1) == {41299: [50.0]}


def test_the_table_shows_each_figure_beside_the_others() -> None:
    spin = ProcessFigures("spin", 41234, [1, 1], [99.0, 97.0], [98.0], [98.0, 96.0])
    scenario = ScenarioFigures("saturating", [spin], [100.0, 100.0], [100.0])
    costs = Costs("off", [1200.0, 1100.0, 1300.0], [1.0, 2.0, 3.0], [900.0, 1000.0, 1100.0])
    lines = gpu_usage_real.report([scenario], [costs])
    assert lines[1].split() == [
        "saturating", "spin", "41234", "1.0", "98.0%", "98.0%", "97.0%", "100.0%", "/", "100.0%",
    ]  # fmt: skip
    assert lines[-1].split() == ["off", "1200.0", "2.0", "1000.0"]
