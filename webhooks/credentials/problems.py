"""A problem found in a credential Secret: where it is and what is expected, never the value."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Problem:
    key: str  # the Secret data key; "" for the Secret as a whole
    field: str  # the field inside the key's JSON document; "" for the key itself
    expected: str  # what is wrong and what is expected, in words; never the value

    def __str__(self) -> str:
        if not self.key:
            return self.expected
        where = f'key "{self.key}"'
        if self.field:
            where += f', field "{self.field}"'
        return f"{where}: {self.expected}"
