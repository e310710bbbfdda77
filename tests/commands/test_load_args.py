"""`gpu-admission load`'s command line: which shard a loader pod copies, and what it fixes of
how the copy goes."""

from __future__ import annotations

import argparse

import pytest

from commands.load import add_load_parser, memory_limit_of, shard_of, tuning_of
from loaders.tuning import CopyTuning


def args(count: int, index: int | None = None) -> argparse.Namespace:
    return argparse.Namespace(shard_count=count, shard_index=index)


def test_shard_index_comes_from_the_indexed_job_environment() -> None:
    assert shard_of(args(4), {"JOB_COMPLETION_INDEX": "2"}) == (2, 4)
    assert shard_of(args(4, 1), {"JOB_COMPLETION_INDEX": "2"}) == (1, 4)
    assert shard_of(args(1), {}) == (0, 1)
    with pytest.raises(ValueError, match="needs --shard-index or \\$JOB_COMPLETION_INDEX"):
        shard_of(args(4), {})
    with pytest.raises(ValueError, match=r"outside 0\.\.3"):
        shard_of(args(4), {"JOB_COMPLETION_INDEX": "4"})
    with pytest.raises(ValueError, match="at least 1"):
        shard_of(args(0), {})


def parsed(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="gpu-admission")
    add_load_parser(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(["load", "--source", "s3://b/p", *argv])


def test_what_the_command_line_fixes_of_the_copy_and_nothing_else() -> None:
    assert tuning_of(parsed()) == CopyTuning()  # everything chosen from the listing
    fixed = parsed("--transfers", "3", "--checkers", "5", "--multi-thread-streams", "2")
    assert tuning_of(fixed) == CopyTuning(transfers=3, checkers=5, multi_thread_streams=2)
    off = tuning_of(parsed("--no-fast-list", "--no-verify"))
    assert (off.fast_list, off.verify) == (False, False)


def test_a_count_below_one_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        parsed("--transfers", "0")
    assert exited.value.code == 2
    assert "--transfers: must be at least 1, not 0" in capsys.readouterr().err


def test_the_memory_limit_comes_from_the_jobs_downward_api_unless_the_flag_says() -> None:
    assert memory_limit_of(parsed(), {"LOADER_MEMORY_LIMIT": "2147483648"}) == 2 * 1024**3
    assert memory_limit_of(parsed("--memory-limit", "1000"), {"LOADER_MEMORY_LIMIT": "5"}) == 1000
    assert memory_limit_of(parsed(), {}) is None
    assert memory_limit_of(parsed(), {"LOADER_MEMORY_LIMIT": "2Gi"}) is None  # not bytes: unknown
