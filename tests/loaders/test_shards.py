"""Sharded loads: the partition (pure, property-tested) and real rclone copying one shard each
from moto, as the indexes of an Indexed loader Job do."""

from __future__ import annotations

import io
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpu_admission.datasets.progress import last_progress
from gpu_admission.datasets.source import parse_data_source
from loaders.rclone import run_load
from loaders.shards import (
    PER_OBJECT_COST,
    SourceObject,
    fingerprint,
    parse_listing,
    partition,
    plan_shard,
    prune,
)
from tests.world.stand_ins.objectstores import S3Store, dataset_files, s3_store, tree

BIN = Path(sys.executable).parent
FILES = dataset_files(files=120, large_bytes=3 * 1024 * 1024)

objects_strategy = st.lists(
    st.builds(
        SourceObject,
        st.text(alphabet="abc/xyz.-_0123", min_size=1, max_size=12),
        st.integers(min_value=0, max_value=10**9),
    ),
    max_size=60,
    unique_by=lambda o: o.path,
)


@given(objects_strategy, st.integers(min_value=1, max_value=16))
def test_every_object_lands_in_exactly_one_shard(objects: list[SourceObject], count: int) -> None:
    parts = partition(objects, count)
    assert len(parts) == count
    placed = [o.path for part in parts for o in part]
    assert sorted(placed) == sorted(o.path for o in objects)  # complete, and no duplicates


@given(objects_strategy, st.integers(min_value=1, max_value=16), st.randoms())
def test_partition_ignores_listing_order(objects: list[SourceObject], count: int, rnd) -> None:
    shuffled = list(objects)
    rnd.shuffle(shuffled)
    assert partition(shuffled, count) == partition(objects, count)
    assert fingerprint(shuffled) == fingerprint(objects)


@given(objects_strategy, st.integers(min_value=1, max_value=16))
def test_no_shard_carries_more_than_a_fair_share_plus_one_object(
    objects: list[SourceObject], count: int
) -> None:
    # The greedy bound: the busiest shard exceeds the mean by at most one object's work.
    work = [sum(o.size + PER_OBJECT_COST for o in part) for part in partition(objects, count)]
    biggest = max((o.size + PER_OBJECT_COST for o in objects), default=0)
    assert max(work) <= sum(work) / count + biggest


def test_one_huge_object_gets_a_shard_and_the_small_ones_spread_over_the_rest() -> None:
    small = [SourceObject(f"small/{i:03d}", 4096) for i in range(300)]
    huge = SourceObject("huge/weights.bin", 50 * 1024**3)
    parts = partition([*small, huge], 4)
    [alone] = [p for p in parts if huge in p]
    assert alone == [huge]
    others = [len(p) for p in parts if huge not in p]
    assert sorted(others) == [100, 100, 100]


def test_plan_shard_rejects_an_index_outside_the_count() -> None:
    with pytest.raises(ValueError, match=r"outside 0\.\.3"):
        plan_shard([], 4, 4)


def test_parse_listing_skips_directories_and_sorts() -> None:
    text = json.dumps(
        [
            {"Path": "b/x", "Size": 3, "IsDir": False, "ModTime": "2026-11-26T00:42:10Z"},
            {"Path": "b", "Size": -1, "IsDir": True},
            {"Path": "a", "Size": 1, "Hashes": {"md5": "0cc1"}, "ModTime": "2026-11-25T09:00:00Z"},
        ]
    )
    assert parse_listing(text) == [
        SourceObject("a", 1, "0cc1|2026-11-25T09:00:00Z"),
        SourceObject("b/x", 3, "|2026-11-26T00:42:10Z"),
    ]


def test_prune_keeps_the_listing_and_other_shards_partial_files(tmp_path: Path) -> None:
    for name in ("keep/a.bin", "stale/b.bin", "keep/c.bin.3f2a9c1d.partial"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"x")
    assert prune(tmp_path, ["keep/a.bin"]) == 1
    assert sorted(tree(tmp_path)) == ["keep/a.bin", "keep/c.bin.3f2a9c1d.partial"]


# -- real rclone against moto ---------------------------------------------------------------


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Store]:
    with s3_store() as store:
        store.put("shard-data", FILES, prefix="train/", public=True)
        yield store


def env(store: S3Store) -> dict[str, str]:
    return {
        "PATH": f"{BIN}:{os.environ['PATH']}",
        "RCLONE_CONFIG_SRC_ENDPOINT": store.endpoint,
        "RCLONE_CONFIG_SRC_REGION": "us-east-1",
    }


def load_shard(
    store: S3Store, dest: Path, index: int, count: int, **kwargs: object
) -> tuple[int, dict, str]:
    out = io.StringIO()
    term = dest.parent / f"termination-{index}"
    code = run_load(
        parse_data_source("s3://shard-data/train"),
        str(dest),
        environ=env(store),
        out=out,
        termination_log=str(term),
        rclone=str(BIN / "rclone"),
        shard_index=index,
        shard_count=count,
        stats_seconds=0.2,
        **kwargs,
    )
    return code, json.loads(term.read_text()), out.getvalue()


@pytest.mark.e2e
def test_four_shards_copy_every_object_exactly_once(s3: S3Store, tmp_path: Path) -> None:
    dest = tmp_path / "data"
    summaries = []
    for index in range(4):
        code, summary, log = load_shard(s3, dest, index, 4)
        assert code == 0, summary
        summaries.append(summary)
        progress = last_progress(log.splitlines())
        assert progress is not None and (progress.shard, progress.shards) == (index, 4)
        assert progress.filesTotal == summary["plannedFiles"]
    assert tree(dest) == FILES
    # rclone's own counts: each shard copied its planned part, and the parts add up.
    assert [s["files"] for s in summaries] == [s["plannedFiles"] for s in summaries]
    assert sum(s["files"] for s in summaries) == len(FILES)
    assert sum(s["bytes"] for s in summaries) == sum(len(b) for b in FILES.values())
    assert len({s["listing"] for s in summaries}) == 1
    assert {s["listedFiles"] for s in summaries} == {len(FILES)}
    # The shard with the large object has the fewest small ones.
    heaviest = max(summaries, key=lambda s: s["plannedBytes"])
    assert heaviest["plannedFiles"] == min(s["plannedFiles"] for s in summaries)


@pytest.mark.e2e
def test_sharded_sync_prunes_once_and_retried_shards_copy_nothing_twice(
    s3: S3Store, tmp_path: Path
) -> None:
    dest = tmp_path / "data"
    (dest / "stale").mkdir(parents=True)
    (dest / "stale" / "old.bin").write_bytes(b"old")
    for index in (1, 0):
        code, summary, _ = load_shard(s3, dest, index, 2, sync=True)
        assert code == 0, summary
    assert not (dest / "stale" / "old.bin").exists()
    assert tree(dest) == FILES
    code, summary, _ = load_shard(s3, dest, 1, 2, sync=True)  # a retried shard
    assert code == 0 and summary["files"] == 0 and summary["checks"] == summary["plannedFiles"]


def test_listing_failure_is_a_plain_failure(s3: S3Store, tmp_path: Path) -> None:
    out = io.StringIO()
    term = tmp_path / "term"
    code = run_load(
        parse_data_source("s3://no-such-shard-bucket"),
        str(tmp_path / "d"),
        environ=env(s3),
        out=out,
        termination_log=str(term),
        rclone=str(BIN / "rclone"),
        shard_index=0,
        shard_count=2,
    )
    summary = json.loads(term.read_text())
    assert code != 0 and summary["phase"] == "Failed"
    assert summary["cause"].startswith("the source was not found"), summary["cause"]
