"""Loads that fail fast and say why, with real rclone: a source too big for its volume is refused
before anything is written (a real size-limited filesystem), a source that stops sending is
given up after the stall timeout while a slow but moving one is not, and a loader stopped while
it lists its source ends at once with its summary."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from controllers.dataset.jobspec import LoaderJobInputs, loader_args
from gpu_admission.config.model import Config
from gpu_admission.datasets.source import parse_data_source
from loaders.rclone import PERMANENT_EXIT_CODE, STALLED_EXIT_CODE
from loaders.shards import SourceObject
from loaders.space import Needed, shortfall, still_to_fetch, with_margin
from loaders.stop import STOPPED_EXIT_CODE
from loaders.watchdog import StallWatchdog, progress_marker
from tests import ROOT
from tests.loaders.test_rclone import BIN, load, s3, s3_env  # noqa: F401  (the fixture)
from tests.support.waits import while_running
from tests.world.stand_ins.holding_proxy import ThreadedHoldingProxy
from tests.world.stand_ins.objectstores import S3Store
from tests.world.stand_ins.trickle import Trickle

pytestmark = pytest.mark.e2e  # real rclone, real filesystems, real waits

MiB = 1024 * 1024


@pytest.fixture
def small_volume(tmp_path: Path) -> Iterator[Path]:
    """A real 4 MiB filesystem (tmpfs), as a 4Mi PVC's volume would be."""
    volume = tmp_path / "volume"
    volume.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(volume)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a 4 MiB tmpfs here (needs root): {done.stderr.strip()}")
    try:
        yield volume
    finally:
        subprocess.run(["umount", "-l", str(volume)], check=False)


def test_a_source_too_big_for_its_volume_fails_at_once_and_for_good(
    s3: S3Store,  # noqa: F811
    small_volume: Path,
) -> None:
    s3.put("big", {f"part-{i}.bin": bytes([i]) * (3 * MiB) for i in range(4)}, public=True)
    code, summary, _ = load("s3://big", small_volume, s3_env(s3))
    assert code == PERMANENT_EXIT_CODE and summary["permanent"] is True
    assert summary["cause"].startswith("the source holds 12.0 MiB; the volume has 4.0 MiB free")
    assert "request a larger PVC" in summary["cause"]
    assert not any(small_volume.iterdir())  # nothing was written


def test_a_refused_shard_prunes_nothing(s3: S3Store, small_volume: Path) -> None:  # noqa: F811
    # Shard 0 of a mirroring load prunes what the source lacks; refused, it must touch nothing.
    s3.put("mirror", {f"part-{i}.bin": bytes([i]) * (3 * MiB) for i in range(4)}, public=True)
    (small_volume / "kept.txt").write_bytes(b"not in the source\n")
    code, summary, _ = load(
        "s3://mirror", small_volume, s3_env(s3), sync=True, shard_index=0, shard_count=2
    )
    assert code == PERMANENT_EXIT_CODE, summary
    assert summary["cause"].startswith("shard 1 of 2: the source holds 6.0 MiB")
    assert (small_volume / "kept.txt").read_bytes() == b"not in the source\n"


def test_a_retry_counts_only_what_is_missing(s3: S3Store, small_volume: Path) -> None:  # noqa: F811
    # 3 MiB against 2 MiB free would be refused; an earlier attempt left 2 MiB of it there.
    files = {f"part-{i}.bin": bytes([i]) * MiB for i in range(3)}
    s3.put("resume", files, public=True)
    for name in ("part-0.bin", "part-1.bin"):
        (small_volume / name).write_bytes(files[name])
    code, summary, log = load("s3://resume", small_volume, s3_env(s3))
    assert code == 0, summary
    assert "size check: 1.0 MiB in 1 files to fetch, 2.0 MiB free" in log
    assert (small_volume / "part-2.bin").read_bytes() == files["part-2.bin"]


def test_the_size_verdict_names_both_figures() -> None:
    needed = Needed(bytes=int(12.4 * 1024**3), files=3, source_bytes=int(12.4 * 1024**3))
    message = shortfall(needed, 10 * 1024**3)
    assert message is not None and message.startswith(
        "the source holds 12.4 GiB; the volume has 10.0 GiB free: request a larger PVC"
    )
    assert shortfall(Needed(MiB, 1, MiB), with_margin(MiB)) is None  # data + 1 % + 256 KiB
    assert shortfall(Needed(MiB, 1, MiB), with_margin(MiB) - 1) is not None
    partial = shortfall(Needed(8 * MiB, 2, 20 * MiB), MiB, "shard 2 of 4: ")
    assert partial is not None and partial.startswith(
        "shard 2 of 4: the source holds 8.0 MiB still to fetch (of 20.0 MiB)"
    )


def test_still_to_fetch_skips_files_already_there_at_their_size(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"x" * 10)
    (tmp_path / "b").write_bytes(b"x" * 3)  # a partial file: fetched again
    objects = [SourceObject("a", 10), SourceObject("b", 10), SourceObject("c/d", 5)]
    assert still_to_fetch(objects, tmp_path) == Needed(bytes=15, files=2, source_bytes=25)


def _env(trickle: Trickle, tmp_path: Path) -> dict[str, str]:
    ca = tmp_path / "ca.pem"
    ca.write_bytes(trickle.ca)
    return {"SSL_CERT_FILE": str(ca), "PATH": os.environ["PATH"]}


def test_a_source_that_stops_sending_is_given_up_and_retried(tmp_path: Path) -> None:
    trickle = Trickle(size=300 * 1024, first=64 * 1024)
    try:
        code, summary, _ = load(
            trickle.url("weights.bin"), tmp_path / "out", _env(trickle, tmp_path), stall_seconds=3
        )
    finally:
        trickle.stop()
    assert code == STALLED_EXIT_CODE and summary["permanent"] is False
    assert summary["cause"].startswith("the source stopped sending: no data for 3s;")
    assert (
        "KiB" in summary["cause"] and "the retry fetches only what is missing" in summary["cause"]
    )


def test_a_slow_but_moving_source_never_trips_the_watchdog(tmp_path: Path) -> None:
    # 16 KiB every 0.2 s: slow, but never 3 s without data.
    trickle = Trickle(size=256 * 1024, first=16 * 1024, step=16 * 1024, pause=0.2)
    try:
        code, summary, _ = load(
            trickle.url("slow.bin"), tmp_path / "out", _env(trickle, tmp_path), stall_seconds=3
        )
    finally:
        trickle.stop()
    assert code == 0, summary
    assert (tmp_path / "out" / "slow.bin").stat().st_size == 256 * 1024


def test_the_watchdog_counts_any_progress() -> None:
    clock = [0.0]
    stats: dict[str, int] = {"bytes": 0, "listed": 0}
    stopped: list[bool] = []
    watchdog = StallWatchdog(10, lambda: stats, lambda: stopped.append(True), lambda: clock[0])
    marker, since = progress_marker(stats), 0.0
    for step in range(1, 30):  # a long listing: no bytes, entries listed
        clock[0] = step
        stats["listed"] = step * 100
        marker, since = watchdog.check(marker, since)
    assert not stopped
    clock[0] += 10  # then silence
    watchdog.check(marker, since)
    assert stopped == [True] and watchdog.stalled is not None


def test_the_job_passes_the_stall_timeout_to_rclone_loads_only() -> None:
    config = Config.model_validate({"dataset": {"stall_timeout_seconds": 120}})

    def args_of(url: str) -> list[str]:
        return loader_args(LoaderJobInputs("j", "ml", "p", "u", parse_data_source(url)), config)

    s3_args = args_of("s3://bucket/prefix")
    assert s3_args[s3_args.index("--stall-timeout") + 1] == "120"
    assert "--stall-timeout" not in args_of("hf://org/model")


@pytest.mark.parametrize(
    ("flags", "cause"),
    [
        ([], "the loader was stopped before the copy finished"),
        (["--digest-only"], "the check was stopped"),  # a source check (`audit --sources`)
    ],
)
def test_a_loader_stopped_while_listing_ends_at_once_and_says_so(
    s3: S3Store,  # noqa: F811
    tmp_path: Path,
    flags: list[str],
    cause: str,
) -> None:
    # In a pod the loader is PID 1, to which the kernel delivers no SIGTERM it has no handler
    # for: without one, a loader deleted mid-listing lives out the grace period. Here (not PID 1)
    # the same gap shows as a loader killed outright: no summary, its rclone left running.
    s3.put("held-listing", {"a.bin": b"a"}, public=True)
    proxy = ThreadedHoldingProxy(s3.endpoint).start()
    proxy.hold("held-listing")
    termination_log = tmp_path / "termination-log"
    env = {**os.environ, **s3_env(s3), "RCLONE_CONFIG_SRC_ENDPOINT": proxy.endpoint}
    command = [sys.executable, "-m", "commands.load", "--source", "s3://held-listing"]
    command += ["--dest", str(tmp_path / "out"), "--rclone", str(BIN / "rclone")]
    command += ["--termination-log", str(termination_log), *flags]
    loader = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, cwd=ROOT)
    try:
        while_running(
            lambda: proxy.held.get("held-listing", 0) > 0,
            "the listing to be in flight",
            {"the loader": loader},
            timeout=30,
        )
        loader.send_signal(signal.SIGTERM)
        assert loader.wait(timeout=30) == STOPPED_EXIT_CODE
        summary = json.loads(termination_log.read_text())
        assert summary["cause"] == cause
        assert summary["permanent"] is False and summary["exitCode"] == STOPPED_EXIT_CODE
        # Its rclone went with it: the held listing request was dropped by its client.
        while_running(lambda: proxy.dropped.get("held-listing"), "rclone to hang up", {}, 30)
    finally:
        loader.kill()
        loader.wait()
        proxy.stop()
