"""How many files and streams a load keeps in flight: chosen from its listing, within its memory
limit, the configuration's overrides winning (loaders.tuning)."""

from __future__ import annotations

from loaders.shards import SourceObject
from loaders.tuning import CopyTuning, choose, hub_workers

MIB = 1024 * 1024
GIB = 1024 * MIB


def files(count: int, size: int, prefix: str = "f") -> list[SourceObject]:
    return [SourceObject(f"{prefix}{i:06d}", size) for i in range(count)]


def flag(flags: list[str], name: str) -> str:
    return flags[flags.index(name) + 1]


def test_many_small_files_are_fetched_64_at_once_with_as_many_checkers() -> None:
    settings = choose(files(20_000, 100 * 1024), 2 * GIB)
    flags = settings.flags()
    assert (flag(flags, "--transfers"), flag(flags, "--checkers")) == ("64", "64")
    assert "--fast-list" in flags and "--ignore-checksum" not in flags
    assert flag(flags, "--buffer-size") == "16Mi"  # 64 x 16 MiB is half of 2 GiB
    assert "20000 files, 0 of them from 64.0 MiB, median 100 KiB" in settings.why


def test_a_few_small_files_are_all_fetched_at_once() -> None:
    settings = choose(files(10, 1000), None)
    assert (settings.transfers, settings.checkers) == (10, 16)


def test_large_shards_share_16_ranged_connections_each_stream_taking_four_chunks() -> None:
    shards = choose(files(4, GIB), 2 * GIB)
    assert (shards.transfers, shards.multi_thread_streams) == (4, 4)
    assert shards.multi_thread_chunk_size == 64 * MIB  # 1 GiB / (4 streams x 4 chunks)
    one = choose(files(1, GIB), 2 * GIB)
    assert (one.transfers, one.multi_thread_streams) == (1, 16)
    assert flag(one.flags(), "--multi-thread-chunk-size") == "16Mi"
    many = choose(files(100, GIB), 2 * GIB)  # still four at once, four streams each
    assert (many.transfers, many.multi_thread_streams) == (4, 4)
    assert flag(one.flags(), "--multi-thread-cutoff") == "64Mi"


def test_chunks_stay_between_8_and_64_mib() -> None:
    assert choose(files(1, 100 * MIB), None).multi_thread_chunk_size == 8 * MIB
    assert choose(files(1, 64 * GIB), None).multi_thread_chunk_size == 64 * MIB


def test_small_files_beside_a_few_large_ones_keep_many_transfers_and_split_the_streams() -> None:
    mixed = choose(files(1000, 4096) + files(2, 2 * GIB, "big"), None)
    assert (mixed.transfers, mixed.multi_thread_streams) == (64, 8)


def test_the_read_ahead_stays_within_half_the_memory_limit() -> None:
    small = files(5000, 4096)
    assert choose(small, 256 * MIB).buffer_size == 2 * MIB  # 128 MiB over 64 transfers
    assert choose(small, 32 * MIB).buffer_size == MIB  # rclone's smallest block
    assert choose(small, 64 * GIB).buffer_size == 16 * MIB  # never above rclone's default
    assert "memory limit 256 MiB" in choose(small, 256 * MIB).why


def test_the_configuration_wins_over_every_choice() -> None:
    tuning = CopyTuning(transfers=8, checkers=12, multi_thread_streams=2, fast_list=False)
    settings = choose(files(20_000, 4096), 2 * GIB, tuning)
    flags = settings.flags()
    assert flag(flags, "--transfers") == "8" and flag(flags, "--checkers") == "12"
    assert flag(flags, "--multi-thread-streams") == "2" and "--fast-list" not in flags
    assert "--ignore-checksum" in choose(files(1, 1), None, CopyTuning(verify=False)).flags()


def test_an_unlisted_source_gets_a_middle_way_and_says_why() -> None:
    settings = choose(None, None)
    assert (settings.transfers, settings.multi_thread_streams) == (16, 4)
    assert "the listing failed" in settings.describe()


def test_hub_download_threads_follow_the_same_choice_up_to_32() -> None:
    assert hub_workers(files(5000, 4096)) == 32
    assert hub_workers(files(3, 5 * GIB)) == 3
    assert hub_workers(files(3, 5 * GIB), CopyTuning(transfers=7)) == 7
