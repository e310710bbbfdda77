"""The code blocks of the docs, as a reader copies them: fenced blocks of one language, also
those indented under a list item (returned without the indent)."""

from __future__ import annotations

import re
import textwrap


def code_blocks(markdown: str, language: str) -> list[str]:
    found = re.findall(rf"^( *)```{language}\n(.*?)^\1```", markdown, re.S | re.M)
    return [textwrap.dedent(body) for _, body in found]


def block_starting(markdown: str, language: str, first_line: str) -> str:
    """The one block whose first line is `first_line` (a file name in a comment, say)."""
    [block] = [b for b in code_blocks(markdown, language) if b.startswith(first_line)]
    return block
