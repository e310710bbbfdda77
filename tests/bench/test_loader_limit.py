"""The loader-limit benchmark's datasets and report: ETags that are the served bytes' MD5, and
targets judged round by round, said met or not."""

from __future__ import annotations

import argparse
import hashlib
from pathlib import Path

from bench.loader_limit import BUCKET, MIB, Copy, make_datasets, report


def _args(**shape: int) -> argparse.Namespace:
    defaults = {"small_files": 6, "small_kib": 1, "prefixes": 2, "large_files": 1, "large_mib": 1}
    return argparse.Namespace(**{**defaults, "capped_mib": 1, **shape})


def test_the_served_tree_has_the_shape_asked_and_its_etags_are_the_md5s(tmp_path: Path) -> None:
    datasets = make_datasets(tmp_path, _args())
    served = tmp_path / "served" / BUCKET
    assert len(list((served / "small").rglob("*.bin"))) == datasets["small"].files == 6
    assert {p.name for p in (served / "small").iterdir()} == {"p000", "p001"}
    assert (served / "large" / "shard-00.bin").stat().st_size == datasets["large"].bytes == MIB
    etags = dict(line.split("\t") for line in (tmp_path / "etags.tsv").read_text().splitlines())
    assert len(etags) == 8
    for key, md5 in etags.items():
        path = tmp_path / "served" / key
        assert hashlib.md5(path.read_bytes()).hexdigest() == md5


def test_the_datasets_are_made_again_only_for_another_shape(tmp_path: Path) -> None:
    make_datasets(tmp_path, _args())
    one = tmp_path / "served" / BUCKET / "small" / "p000" / "f000000.bin"
    first = one.read_bytes()
    make_datasets(tmp_path, _args())
    assert one.read_bytes() == first  # kept
    make_datasets(tmp_path, _args(small_files=4))
    assert one.read_bytes() != first
    assert len(list((tmp_path / "served" / BUCKET / "small").rglob("*.bin"))) == 4


def _copy(scenario: str, client: str, round_: int, seconds: float, peak: float = 100.0) -> Copy:
    return Copy(scenario, client, round_, seconds, 1000, 1000 * MIB, seconds / 2, peak)


def test_targets_are_ratios_within_each_round_said_met_or_not() -> None:
    copies = []
    for round_, machine in ((0, 1.0), (1, 10.0)):  # the second round on a busy machine
        copies += [
            _copy("small, first byte", "s5cmd", round_, 1.0 * machine),
            _copy("small, first byte", "load", round_, 2.0 * machine),  # half s5cmd's rate
            _copy("small, first byte", "rclone", round_, 2.0 * machine),
            _copy("small", "load", round_, 1.0 * machine, peak=3000.0),
            _copy("small", "disk", round_, 1.2 * machine),
        ]
    lines = report(copies, job_memory_mib=2048.0)
    said = {line.split(": ")[0]: line for line in lines if "target" in line}
    first_byte = next(k for k in said if k.startswith("small, first byte"))
    assert "files per second 0.50 (0.50 - 0.50)" in said[first_byte]
    assert said[first_byte].endswith("target at least 0.8: NOT met")
    disk = next(k for k in said if k.startswith("small ") and "load/disk" in k)
    assert said[disk].endswith("target at least 0.7: met")
    assert "load/rclone seconds 1.00 (1.00 - 1.00)" in said[next(k for k in said if "wrapper" in k)]
    assert lines[-1] == "the loader's peak memory 3000 MiB, the Job's limit 2048: NOT met"


def test_the_loader_without_verification_is_judged_beside_it_for_its_price() -> None:
    copies = []
    for round_ in (0, 1):
        copies += [
            _copy("large shards", "s5cmd", round_, 1.0),
            _copy("large shards", "load", round_, 2.5),
            _copy("large shards", "load-nv", round_, 1.0),
        ]
    lines = [line for line in report(copies, job_memory_mib=2048.0) if "load" in line]
    judged = [line for line in lines if "load/s5cmd" in line or "load-nv/s5cmd" in line]
    assert judged[0].startswith("large shards       load/s5cmd mib per second 0.40")
    assert judged[0].endswith("target at least 0.9: NOT met")
    assert "load-nv/s5cmd mib per second 1.00 (1.00 - 1.00)" in judged[1]
    assert judged[1].endswith("target at least 0.9: met (verification off, for its price)")
