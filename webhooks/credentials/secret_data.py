"""A Secret's data as the workload will see it: `data` (base64) overlaid with `stringData`.

The API server merges `stringData` into `data` before admission, so webhooks normally see only
`data`; both are handled anyway, with `stringData` winning per key as it does in the API server.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

from webhooks.credentials.problems import Problem


def _encoded_size(obj: Mapping[str, Any]) -> int:
    """An upper bound of the decoded size, computed without decoding anything."""
    size = 0
    for value in (obj.get("data") or {}).values():
        if isinstance(value, str):
            size += len(value) * 3 // 4
    for value in (obj.get("stringData") or {}).values():
        if isinstance(value, str):
            size += len(value.encode())
    return size


def decode_secret_data(
    obj: Mapping[str, Any], max_bytes: int
) -> tuple[dict[str, bytes], list[Problem]]:
    """Decode a Secret's values. Problems name the key; the size bound covers all values."""
    bound = _encoded_size(obj)
    if bound > max_bytes:
        return {}, [
            Problem(
                "",
                "",
                f"the Secret's values are too large (about {bound} bytes; the limit for "
                f"credential Secrets is {max_bytes} bytes); a credential file is a few kilobytes",
            )
        ]
    # Per key: the decoded bytes, or the problem that stops decoding. stringData is applied
    # after data, so it replaces a bad data value of the same key as the API server would.
    decoded: dict[str, bytes | Problem] = {}
    for key, value in (obj.get("data") or {}).items():
        try:
            if not isinstance(value, str):
                raise TypeError
            decoded[key] = base64.b64decode(value, validate=True)
        except (TypeError, binascii.Error):
            decoded[key] = Problem(key, "", "the value under data must be base64-encoded")
    for key, value in (obj.get("stringData") or {}).items():
        if isinstance(value, str):
            decoded[key] = value.encode()
        else:
            decoded[key] = Problem(key, "", "the value under stringData must be a string")
    values = {k: v for k, v in decoded.items() if isinstance(v, bytes)}
    problems = [v for v in decoded.values() if isinstance(v, Problem)]
    return values, problems


WHITESPACE = (
    "has leading or trailing whitespace (often a newline from a file); use --from-literal or "
    "strip the file"
)


def text_values(
    data: Mapping[str, bytes], keys: tuple[str, ...]
) -> tuple[dict[str, str], list[Problem]]:
    """The values of `keys` present in `data` as text, and a problem for each that is binary,
    empty or padded with whitespace (those are left out of the text)."""
    text: dict[str, str] = {}
    problems: list[Problem] = []
    for key in keys:
        if key not in data:
            continue
        try:
            value = data[key].decode("utf-8")
        except UnicodeDecodeError:
            problems.append(Problem(key, "", "must be text; this is binary data"))
            continue
        if not value.strip():
            problems.append(Problem(key, "", "is empty; give it a value or remove the key"))
        elif value != value.strip():
            problems.append(Problem(key, "", WHITESPACE))
        else:
            text[key] = value
    return text, problems
