"""Accepting an intended slowdown of a named speed cell, and recording who accepted it.

A cell is named ``metric@streams`` (``decode_cpu_s_per_token@1``). Two ways to accept one:

- a commit trailer on the branch (a commit after the merge base, up to head):
  ``Gates-Accept-Slower: decode_cpu_s_per_token@1`` — accepted by the commit's author;
- a pull-request label ``gates-accept-slower:decode_cpu_s_per_token@1`` — read by
  ``python -m gates.report.github accept`` (who added the label) into a file that
  ``gates run --accept FILE`` reads.

A *slower* cell that is accepted does not fail the run; the receipt names it, who accepted
it and how. When every slower cell is accepted the speed part passes. An acceptance that
matches no slower cell is recorded too (``applied: false``), so a stale one shows.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import git

from gates import BadInput
from gates.jsontypes import JsonObject
from gates.report.view import Manifest
from gates.run.results import Status

TRAILER = "Gates-Accept-Slower"
LABEL = "gates-accept-slower:"
CELL = re.compile(r"^[a-z_]+@[1-9][0-9]*$")


def _cell(text: str, where: str) -> str:
    cell = text.strip()
    if not CELL.match(cell):
        raise BadInput(f"{where}: {cell!r} is not a speed cell (metric@streams, e.g. ttft_ms@1)")
    return cell


def from_trailers(repo: git.Repo, merge_base: str | None, head: str) -> list[dict[str, str]]:
    """``Gates-Accept-Slower`` trailers of the commits after the merge base up to head."""
    span = f"{merge_base}..{head}" if merge_base else head
    sep = "\x1e"
    fmt = f"%H%x1f%an <%ae>%x1f%(trailers:key={TRAILER},valueonly,separator=%x1d){sep}"
    out = []
    for rec in repo.git.log(f"--format={fmt}", span).split(sep):
        parts = rec.strip().split("\x1f")
        if len(parts) != 3 or not parts[2].strip():
            continue
        sha, author, cells = parts
        for text in cells.split("\x1d"):
            where = f"commit {sha[:12]}: {TRAILER}"
            out.append({"cell": _cell(text, where), "by": author, "via": f"trailer {sha[:12]}"})
    return out


def load(path: str | None) -> list[dict[str, str]]:
    """An acceptance file (``python -m gates.report.github accept``): [{cell, by, via}, ...]."""
    if path is None:
        return []
    try:
        items = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise BadInput(f"--accept {path}: not a JSON list of acceptances: {e}") from None
    if not isinstance(items, list):
        raise BadInput(f"--accept {path}: expected a JSON list, got {type(items).__name__}")
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, dict) or not all(
            isinstance(item.get(k), str) for k in ("cell", "by", "via")
        ):
            raise BadInput(f"--accept {path}: item {i}: expected {{cell, by, via}} strings")
        out.append(
            {k: item[k] for k in ("cell", "by", "via")}
            | {"cell": _cell(item["cell"], f"--accept {path}: item {i}")}
        )
    return out


def apply(man: JsonObject, accepted: list[dict[str, str]]) -> None:
    """Mark the accepted slower cells of the manifest's speed part, pass it when every
    slower cell is accepted, and record each acceptance (``applied``: it matched one)."""
    speed = man.get("speed")
    cells = (speed or {}).get("cells") or []
    by_cell: dict[str, dict[str, str]] = {}
    for a in accepted:
        by_cell.setdefault(a["cell"], a)
    slower = [c for c in cells if c.get("verdict") == "slower"]
    for c in slower:
        a = by_cell.get(f"{c['metric']}@{c['parallel']}")
        if a is not None:
            c["accepted_by"] = f"{a['by']} ({a['via']})"
    every = bool(slower) and all(c.get("accepted_by") for c in slower)
    if speed and every and speed.get("status") == str(Status.FAIL):
        speed["status"] = str(Status.PASS)
    named = {f"{c['metric']}@{c['parallel']}" for c in slower}
    man["accepted"] = [a | {"applied": a["cell"] in named} for a in accepted]


def lines(man: Manifest) -> list[str]:
    """The receipt's record: who accepted what, and acceptances that matched no slower cell."""
    out = []
    for a in man.accepted:
        if a.applied:
            out.append(f"slower `{a.cell}` accepted by {a.by} ({a.via})")
        else:
            out.append(f"`{a.cell}` accepted by {a.by} ({a.via}), but it is not slower")
    return out
