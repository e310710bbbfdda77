"""hf:// loads: `gpu-admission load` as a loader pod runs it, the real huggingface_hub against
the Hub stand-in (HTTPS behind a private CA): revisions resolved to one commit, data-include,
private and gated repositories, refused tokens, throttling and outages, and shards."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from certs.issue import ServingSpec, issue_bundle
from loaders.hub import ProgressTicker, on_volume
from loaders.rclone import PERMANENT_EXIT_CODE
from loaders.shards import SourceObject, plan_shard
from tests.world.stand_ins.hf_hub import HubStandIn, hub_stand_in
from tests.world.stand_ins.objectstores import tree

pytestmark = pytest.mark.e2e

MODEL = {
    "config.json": b'{"hidden_size": 64}',
    "tokenizer.json": b'{"version": "1.0"}' * 50,
    "model-00001-of-00002.safetensors": bytes(range(256)) * 4096,
    "model-00002-of-00002.safetensors": bytes(reversed(range(256))) * 4096,
    "README.md": b"# tiny",
}
DATASET = {f"data/train-{i:05d}.parquet": bytes([i]) * (1000 + i) for i in range(12)} | {
    "data/test-00000.parquet": b"t" * 500,
    "README.md": b"# set",
}


@pytest.fixture(scope="module")
def hub() -> Iterator[HubStandIn]:
    with hub_stand_in(page_size=5) as stand_in:  # small pages: the listing really paginates
        model = stand_in.repo("acme/tiny-llm")
        model.commit(MODEL)
        model.refs["v1.0"] = model.refs["main"]
        stand_in.repo("acme/web-text", "dataset").commit(DATASET)
        reader = stand_in.token("reader")
        stand_in.repo("acme/private-llm", private=True, readers={reader}).commit(MODEL)
        stand_in.repo("acme/gated-llm", gated=True, readers={reader}).commit(MODEL)
        yield stand_in


def load(
    hub: HubStandIn, source: str, dest: Path, *args: str, token: str | None = None, **env: str
) -> tuple[int, dict[str, Any], str]:
    """The loader as the Job runs it: its own process, configured by environment."""
    term = dest.parent / f"{dest.name}.termination-log"
    environ = {
        "PATH": os.environ["PATH"],
        "HOME": str(dest.parent),
        "HF_HOME": str(dest.parent / "hf-home"),
        "HF_ENDPOINT": hub.endpoint,
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "SSL_CERT_FILE": str(hub.ca_path),
        **({"HF_TOKEN": token} if token else {}),
        **env,
    }
    done = subprocess.run(
        [
            *(sys.executable, "-m", "commands", "load", "--source", source, "--dest", str(dest)),
            *("--termination-log", str(term), "--stats-seconds", "0.2", *args),
        ],
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    summary = json.loads(term.read_text()) if term.exists() else {}
    return done.returncode, summary, done.stdout + done.stderr


def test_a_model_at_main_is_fetched_at_its_commit(hub: HubStandIn, tmp_path: Path) -> None:
    dest = tmp_path / "data"
    code, summary, log = load(hub, "hf://acme/tiny-llm", dest)
    assert code == 0, log
    files = {k: v for k, v in tree(dest).items() if not k.startswith(".cache/")}
    assert files == MODEL
    assert summary["commit"] == hub.repos[("model", "acme/tiny-llm")].refs["main"]
    assert summary["files"] == len(MODEL) and summary["bytes"] == sum(map(len, MODEL.values()))
    assert summary["phase"] == "Succeeded"
    # As many download threads as files, the model's few files all at once (loaders.tuning).
    assert f'"download threads: {len(MODEL)} for {len(MODEL)} files"' in log
    # Every file came from the resolved commit, never from "main" again.
    resolved = [p for m, p in hub.requests if "/resolve/" in p and p.startswith("/acme/tiny-llm/")]
    assert resolved and all(f"/resolve/{summary['commit']}/" in p for p in resolved)


def test_a_tag_resolves_and_data_include_narrows(hub: HubStandIn, tmp_path: Path) -> None:
    dest = tmp_path / "data"
    code, summary, log = load(
        hub, "hf://acme/tiny-llm@v1.0", dest, "--include", "*.json, config.*", "--transfers", "1"
    )
    assert code == 0, log
    files = {k: v for k, v in tree(dest).items() if not k.startswith(".cache/")}
    assert files == {k: v for k, v in MODEL.items() if k.endswith(".json")}
    assert summary["files"] == 2
    assert '"download threads: 1 for 2 files"' in log  # the configured number wins


def test_a_dataset_listed_over_several_pages(hub: HubStandIn, tmp_path: Path) -> None:
    dest = tmp_path / "data"
    hub.requests.clear()
    code, _, log = load(hub, "hf://datasets/acme/web-text", dest, "--include", "data/*")
    assert code == 0, log
    files = {k: v for k, v in tree(dest).items() if not k.startswith(".cache/")}
    assert files == {k: v for k, v in DATASET.items() if k.startswith("data/")}
    pages = [p for _, p in hub.requests if "/tree/" in p]
    assert len(pages) >= 3 and any("cursor=" in p for p in pages)


def test_a_moved_branch_loads_the_new_commit_and_only_what_changed(
    hub: HubStandIn, tmp_path: Path
) -> None:
    repo = hub.repo("acme/moving")
    first = repo.commit(MODEL)
    dest = tmp_path / "data"
    assert load(hub, "hf://acme/moving", dest)[1]["commit"] == first
    changed = MODEL | {"config.json": b'{"hidden_size": 128}'}
    second = repo.commit(changed)
    code, summary, log = load(hub, "hf://acme/moving", dest)
    assert code == 0, log
    assert summary["commit"] == second != first
    assert {k: v for k, v in tree(dest).items() if not k.startswith(".cache/")} == changed
    assert summary["files"] == 1 and summary["checks"] == len(MODEL) - 1


def test_sync_mirrors_the_commit_and_keeps_the_bookkeeping(hub: HubStandIn, tmp_path: Path) -> None:
    repo = hub.repo("acme/shrinking")
    repo.commit(MODEL)
    dest = tmp_path / "data"
    assert load(hub, "hf://acme/shrinking", dest)[0] == 0
    smaller = {k: v for k, v in MODEL.items() if k != "README.md"}
    repo.commit(smaller)
    (dest / "notes.txt").write_text("mine")
    code, _, log = load(hub, "hf://acme/shrinking", dest, "--sync")
    assert code == 0, log
    assert {k: v for k, v in tree(dest).items() if not k.startswith(".cache/")} == smaller
    assert (dest / ".cache" / "huggingface").is_dir()  # what makes the next load incremental
    # Without --sync, files the commit dropped stay, as an rclone copy leaves them.
    (dest / "notes.txt").write_text("mine")
    assert load(hub, "hf://acme/shrinking", dest)[0] == 0
    assert (dest / "notes.txt").exists()


def test_a_private_repository_needs_a_token_that_never_shows(
    hub: HubStandIn, tmp_path: Path
) -> None:
    code, summary, log = load(hub, "hf://acme/private-llm", tmp_path / "anon")
    assert code == PERMANENT_EXIT_CODE and summary["permanent"] is True
    assert "no model repository acme/private-llm, or it is private" in summary["cause"]
    assert "name a huggingface-credential Secret" in summary["cause"]
    token = hub.token("reader")
    code, summary, log = load(hub, "hf://acme/private-llm", tmp_path / "ok", token=token)
    assert code == 0, log
    assert token not in log and token not in json.dumps(summary)


def test_a_gated_repository_without_access_is_permanent(hub: HubStandIn, tmp_path: Path) -> None:
    outsider = hub.token("outsider")
    code, summary, log = load(hub, "hf://acme/gated-llm", tmp_path / "d", token=outsider)
    assert code == PERMANENT_EXIT_CODE
    assert summary["cause"].startswith("the model acme/gated-llm is gated")
    assert outsider not in log and outsider not in summary["cause"]


def test_an_unknown_token_is_refused_for_good(hub: HubStandIn, tmp_path: Path) -> None:
    code, summary, _ = load(hub, "hf://acme/tiny-llm", tmp_path / "d", token="hf_" + "x" * 34)
    assert code == PERMANENT_EXIT_CODE
    assert summary["cause"].startswith("the Hub rejected the token")


def test_an_unknown_revision_is_permanent(hub: HubStandIn, tmp_path: Path) -> None:
    code, summary, _ = load(hub, "hf://acme/tiny-llm@v9", tmp_path / "d")
    assert code == PERMANENT_EXIT_CODE
    assert "has no revision 'v9'" in summary["cause"]


def test_throttling_and_outages_are_transient(hub: HubStandIn, tmp_path: Path) -> None:
    hub.fail("/api/models/acme/tiny-llm/", 429, times=1)
    code, summary, _ = load(hub, "hf://acme/tiny-llm", tmp_path / "a")
    assert code == 1 and summary["permanent"] is False
    assert summary["cause"].startswith("the Hub is throttling requests or briefly unavailable")
    hub.fail("/api/models/acme/tiny-llm/", 503, times=1)
    code, summary, _ = load(hub, "hf://acme/tiny-llm", tmp_path / "b")
    assert code == 1 and summary["permanent"] is False
    code, summary, _ = load(
        hub, "hf://acme/tiny-llm", tmp_path / "c", HF_ENDPOINT="https://127.0.0.1:9"
    )
    assert code == 1 and "could not be reached" in summary["cause"]


def test_an_untrusted_hub_certificate_is_permanent(hub: HubStandIn, tmp_path: Path) -> None:
    other_ca = tmp_path / "other-ca.crt"
    other_ca.write_bytes(issue_bundle(ServingSpec("other", "test")).ca_cert_pem)
    code, summary, _ = load(hub, "hf://acme/tiny-llm", tmp_path / "d", SSL_CERT_FILE=str(other_ca))
    assert code == PERMANENT_EXIT_CODE
    assert "TLS certificate is not trusted" in summary["cause"]


def test_shards_split_one_commit_and_together_fetch_every_file(
    hub: HubStandIn, tmp_path: Path
) -> None:
    dest = tmp_path / "data"
    listings, files = set(), 0
    for index in range(3):
        code, summary, log = load(
            hub,
            "hf://datasets/acme/web-text",
            dest,
            "--shard-count",
            "3",
            "--shard-index",
            str(index),
        )
        assert code == 0, log
        listings.add(summary["listing"])
        files += summary["files"]
        assert summary["listedFiles"] == len(DATASET)
    assert len(listings) == 1 and files == len(DATASET)
    assert {k: v for k, v in tree(dest).items() if not k.startswith(".cache/")} == DATASET


def test_progress_counts_finished_files_and_what_is_written_of_the_others(
    tmp_path: Path,
) -> None:
    objects = (SourceObject("a.bin", 100), SourceObject("sub/b.bin", 300))
    plan = plan_shard(objects, 0, 1)
    (tmp_path / "a.bin").write_bytes(b"a" * 100)
    partials = tmp_path / ".cache/huggingface/download/sub"
    partials.mkdir(parents=True)
    (partials / "b.bin.5f3e.incomplete").write_bytes(b"b" * 120)
    assert on_volume(tmp_path, objects) == (1, 220)
    out = io.StringIO()
    ticker = ProgressTicker(tmp_path, plan, out, 0.01, threading.Lock())
    progress = ticker.progress()
    assert (progress.bytesDone, progress.bytesTotal) == (220, 400)
    assert (progress.filesDone, progress.filesTotal) == (1, 2)
    with ticker:
        deadline = time.monotonic() + 10
        while "progress" not in out.getvalue() and time.monotonic() < deadline:
            time.sleep(0.01)
    (line, *_) = out.getvalue().splitlines()
    assert json.loads(line)["progress"]["bytesDone"] == 220
