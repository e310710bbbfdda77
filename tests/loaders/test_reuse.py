"""The version a load read and what a load into a clone does with it: the listing's digest, the
reuse / refresh / afresh decision, and the marker that lets a retried load afresh resume."""

from __future__ import annotations

from pathlib import Path

import pytest

from loaders.reuse import CloneLoad, begin, decide, finish, marker_path, resume
from loaders.shards import SourceObject, prune
from loaders.source_digest import source_digest

LISTING = [
    SourceObject("b/weights.bin", 300, "9e10|2026-11-25T09:00:00Z"),
    SourceObject("a/config.json", 10, "0cc1|2026-11-25T09:00:00Z"),
]


def test_the_digest_covers_paths_sizes_and_versions_in_any_order() -> None:
    digest = source_digest(LISTING)
    assert digest.digest.startswith("sha256:") and len(digest.digest) == 7 + 64
    assert (digest.files, digest.bytes) == (2, 310)
    assert source_digest(list(reversed(LISTING))) == digest
    rewritten = [LISTING[0], SourceObject("a/config.json", 10, "77aa|2026-11-26T01:00:00Z")]
    renamed = [LISTING[0], SourceObject("a/config.yaml", 10, LISTING[1].version)]
    for other in (rewritten, renamed, LISTING[:1], [*LISTING, SourceObject("c", 0)]):
        assert source_digest(other).digest != digest.digest
    assert source_digest(LISTING, "commit-1").digest != source_digest(LISTING, "commit-2").digest
    assert digest.summary_fields() == {
        "digest": digest.digest,
        "digestFiles": 2,
        "digestBytes": 310,
    }


NOW = source_digest(LISTING)


@pytest.mark.parametrize(
    ("clone_of", "expected", "now", "pinned", "action", "words"),
    [
        (None, None, NOW, False, CloneLoad.NONE, ""),
        ("ds-1", NOW.digest, NOW, False, CloneLoad.REUSED, "lists as it did when VolumeSnapshot"),
        ("ds-1", NOW.digest, NOW, True, CloneLoad.REUSED, "nothing to copy"),
        ("ds-1", "sha256:0000", NOW, True, CloneLoad.REFRESHED, "pinned by its SHA-256"),
        ("ds-1", "sha256:0000", NOW, False, CloneLoad.AFRESH, "the source changed since"),
        ("ds-1", None, NOW, False, CloneLoad.AFRESH, "recorded no digest"),
        ("ds-1", NOW.digest, None, False, CloneLoad.AFRESH, "could not be listed"),
    ],
)
def test_what_a_clone_load_does(
    clone_of: str | None,
    expected: str | None,
    now: object,
    pinned: bool,
    action: CloneLoad,
    words: str,
) -> None:
    decision = decide(clone_of, expected, now, pinned)  # type: ignore[arg-type]
    assert decision.action is action
    assert words in decision.reason
    assert decision.copies is (action is not CloneLoad.REUSED)
    assert decision.fetch_all is (action is CloneLoad.AFRESH)


def test_a_changed_source_names_both_digests() -> None:
    decision = decide("ds-1", "sha256:" + "ab" * 32, NOW, False)
    then, now = "ab" * 6, NOW.digest.removeprefix("sha256:")[:12]
    assert f"(digest {then} then, {now} now): loading afresh" in decision.reason


def test_a_retried_load_afresh_resumes_where_its_marker_says(tmp_path: Path) -> None:
    marker = marker_path(tmp_path, 0, 1)
    afresh = decide("ds-1", "sha256:0000", NOW, False)
    assert resume(afresh, marker, NOW).fetch_all  # no marker: a first attempt
    begin(afresh, marker, NOW)
    assert marker.read_text().strip() == NOW.digest
    resumed = resume(afresh, marker, NOW)
    assert resumed.action is CloneLoad.AFRESH and not resumed.fetch_all
    assert "resumed" in resumed.reason
    # The source changed again since the marker was left: afresh once more.
    other = source_digest(LISTING[:1])
    assert resume(afresh, marker, other).fetch_all
    finish(marker)
    assert not marker.exists()


def test_shards_have_markers_of_their_own_and_pruning_keeps_them(tmp_path: Path) -> None:
    markers = {marker_path(tmp_path, i, 3).name for i in range(3)}
    assert len(markers) == 3 and marker_path(tmp_path, 0, 1).name not in markers
    for name in (*markers, "stale.bin", "keep.bin"):
        (tmp_path / name).write_text("x")
    assert prune(tmp_path, ["keep.bin"]) == 1
    assert {p.name for p in tmp_path.iterdir()} == {*markers, "keep.bin"}
