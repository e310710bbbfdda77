"""Checking a loaded file against the SHA-256 its PVC names (`data-sha256`): read back from the
volume after the copy, so what is checked is what pods will read. A mismatch is permanent (the
same URL will serve the same bytes again) and the file is removed, so no pod starts on data
that is not what the PVC asked for."""

from __future__ import annotations

import hashlib
from pathlib import Path

CHUNK = 4 * 1024 * 1024


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while chunk := stream.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def verify_sha256(path: Path, expected: str) -> str | None:
    """None when the file has the expected digest; otherwise why not, in words that name both
    digests (the file is removed)."""
    try:
        actual = file_sha256(path)
    except OSError as exc:
        return f"cannot read the loaded file {path.name} to check its SHA-256: {exc.strerror}"
    if actual == expected.lower():
        return None
    path.unlink(missing_ok=True)
    return (
        f"the loaded file {path.name} has SHA-256 {actual}, but the PVC's data-sha256 says "
        f"{expected.lower()}: the file on the server is not the one expected (it was removed "
        "from the volume); fix the digest or the URL"
    )
