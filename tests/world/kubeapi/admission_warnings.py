"""Webhook warnings as kube-apiserver's warning recorder passes them on as ``Warning`` headers.

The recorder (``endpoints/filters/warning.go``) drops empty texts and duplicates, drops texts
that are not valid header text (control characters), and once the texts of one response exceed
4096 runes it shortens every warning to 256 runes, omitting any that would still overflow.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable

TOTAL_RUNES = 4 * 1024
ITEM_RUNES = 256


def _valid_text(text: str) -> bool:
    return not any(unicodedata.category(ch) == "Cc" for ch in text)


def cap_warnings(texts: Iterable[str]) -> list[str]:
    """The header texts the recorder would write for these warnings, in order."""
    written = 0
    truncating = False
    headers: list[str] = []
    ordered: list[str] = []
    seen: set[str] = set()
    for text in texts:
        if not text or (truncating and written >= TOTAL_RUNES) or text in seen:
            continue
        seen.add(text)
        ordered.append(text)
        if truncating:
            text = text[:ITEM_RUNES]
        if not _valid_text(text):
            continue
        if truncating or written + len(text) <= TOTAL_RUNES:
            written += len(text)
            headers.append(text)
            continue
        # Over the cap for the first time: replay everything so far, shortened.
        truncating = True
        written = 0
        headers = []
        for earlier in ordered:
            short = earlier[:ITEM_RUNES]
            if _valid_text(short):
                written += len(short)
                headers.append(short)
    return headers
