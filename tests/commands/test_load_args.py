"""`gpu-admission load`'s command line: which shard a loader pod copies."""

from __future__ import annotations

import argparse

import pytest

from commands.load import shard_of


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
