"""Small shape checks shared by the validators. Each returns True when the value looks right."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

_EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s.]+")


def is_url(value: object, schemes: tuple[str, ...] = ("https",)) -> bool:
    """An absolute URL with one of `schemes` and a host."""
    if not isinstance(value, str) or not value or value != value.strip():
        return False
    try:
        parts = urlsplit(value)
        hostname = parts.hostname
    except ValueError:
        return False
    return parts.scheme in schemes and bool(hostname)


def is_email(value: object) -> bool:
    return isinstance(value, str) and _EMAIL.fullmatch(value) is not None


def is_text(value: object) -> bool:
    """A non-empty string that is not only whitespace."""
    return isinstance(value, str) and bool(value.strip())
