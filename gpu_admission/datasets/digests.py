"""How a dataset's source digest is written and read: `sha256:<64 hex>` in annotations and
summaries, its first 12 hex digits in messages people read."""

from __future__ import annotations

DIGEST_PREFIX = "sha256:"


def short_digest(digest: str) -> str:
    return digest.removeprefix(DIGEST_PREFIX)[:12]
