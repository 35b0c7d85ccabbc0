"""Markdown pieces. Tables without padding: GitHub aligns them itself, and padding a wide
receipt to its longest cell multiplied its size. Fences that hold any text: a traceback or
stderr never runs into the Markdown around it."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any


def _cell(v: Any) -> str:
    """One line: a cell cannot hold a code block, so of a multi-line text (a traceback) only
    the first line; the rest is in the receipt's lists and the JSON manifest."""
    first, nl, _ = str(v).strip().partition("\n")
    return first.replace("|", "\\|") + (" …" if nl else "")


def md_table(rows: Sequence[Sequence[Any]], headers: Sequence[str]) -> str:
    lines = ["| " + " | ".join(map(_cell, headers)) + " |"]
    lines.append("|" + "|".join(" --- " for _ in headers) + "|")
    lines += ["| " + " | ".join(map(_cell, row)) + " |" for row in rows]
    return "\n".join(lines)


def fence(text: str, indent: int = 0) -> str:
    """``text`` as a fenced code block, every line indented by ``indent`` (to sit in a list
    item), its fence longer than any run of backticks in the text, so no line ends it early."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    ticks = "`" * max(3, longest + 1)
    pad = " " * indent
    lines = text.strip("\n").splitlines()
    body = "".join(f"{pad}{ln.rstrip()}\n" if ln.strip() else "\n" for ln in lines)
    return f"{pad}{ticks}\n{body}{pad}{ticks}"


def bullet(text: Any) -> str:
    """The text of a list item: its first line, and the lines after it (a traceback in a
    reason) in a fenced block inside the item."""
    first, _, rest = str(text).strip().partition("\n")
    return first if not rest.strip() else f"{first}\n\n{fence(rest, 2)}\n"
