"""Markdown tables without padding: GitHub aligns them itself, and padding a wide
receipt to its longest cell multiplied its size."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def _cell(v: Any) -> str:
    return str(v).replace("|", "\\|").replace("\n", " ")


def md_table(rows: Sequence[Sequence[Any]], headers: Sequence[str]) -> str:
    lines = ["| " + " | ".join(map(_cell, headers)) + " |"]
    lines.append("|" + "|".join(" --- " for _ in headers) + "|")
    lines += ["| " + " | ".join(map(_cell, row)) + " |" for row in rows]
    return "\n".join(lines)
