"""Reading a whole collection in pages (`limit` and `continue`), as raw objects, counting the
requests: what a one-off reader of a big cluster (`gpu-admission audit`) needs, without a
request per object or a whole list in one answer."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

PAGE_SIZE = 500


@dataclass
class Pages:
    """A reader that counts the list requests it made."""

    page_size: int = PAGE_SIZE
    requests: int = 0

    def items(self, call: Callable[..., Any], **kwargs: Any) -> Iterator[dict[str, Any]]:
        """Every object `call` (a kubernetes client list method) returns, page after page."""
        token: str | None = None
        while True:
            page: dict[str, Any] = {"limit": self.page_size, "_preload_content": False}
            if token:
                page["_continue"] = token
            response = call(**kwargs, **page)
            self.requests += 1
            body = json.loads(response.data)
            yield from body.get("items") or ()
            token = (body.get("metadata") or {}).get("continue")
            if not token:
                return
