"""Manifest -> Markdown receipt (Jinja2 templates, plain Markdown tables), JSON beside it.

Everything a receipt shows comes from the manifest, so ``python -m gates show`` can render
a receipt again from its JSON alone.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import jinja2

from gates.jsontypes import JsonObject
from gates.judge.checks.lean import lean_counts, lean_line
from gates.judge.kinds import unit
from gates.judge.results import Cell, GateResult
from gates.report import accept, speed_chart
from gates.report.receipt.counts import arm_counts, arms_line
from gates.report.receipt.failures import failure_lines
from gates.report.receipt.headline import verdict  # noqa: F401 - render.verdict, as before
from gates.report.receipt.lists import crashed, notices, skipped
from gates.report.receipt.table import bullet, fence, md_table
from gates.report.view import Manifest
from gates.run import envs, store
from gates.run.results import Status

TEMPLATES = Path(__file__).parent / "templates"
ICON = {"pass": "✅", "fail": "❌", "could_not_run": "⚠️", "not_comparable": "➖", "empty": "➖"}


def cell_text(kind: str, cell: Cell | None) -> str:
    """One notion of *held* for every gate: comparisons (pairs of arms) or arms that hold, out
    of those judged; an equality gate adds its requests, saying which way they count."""
    if cell is None:
        return "—"
    st, c = cell.status, cell.counts
    counted = unit(kind)
    held, judged = c.get("pass", 0), c.get("pass", 0) + c.get("fail", 0)
    nc = f" (+{c['not_comparable']} n/c)" if c.get("not_comparable") else ""
    reqs = ""
    if counted == "pairs" and cell.total:
        differ = cell.total - cell.matched
        reqs = (
            f", {differ} of {cell.total} requests differ" if differ else f", {cell.total} requests"
        )
    if st == "pass":
        return f"✅ {held}/{judged} {counted} hold{reqs}{nc}"
    if st == "fail":
        return f"❌ {held}/{judged} {counted} hold{reqs}{nc}"
    if st == "could_not_run":
        blocked = c.get("could_not_run", 0)
        rest = f"; {held}/{judged} of the rest hold" if judged else ""
        return f"⚠️ {blocked} {counted} could not run{rest}"
    return "n/c"


def gate_table(man: Manifest) -> str:
    col = man.matrix.columns
    gates = man.gates
    values: list[str] = []
    for g in gates:
        for k in g.cells:
            if k not in values:
                values.append(k)
    headers = ["gate", *(values if col else ["result"])]
    rows = []
    for g in gates:
        if col:
            cells = [cell_text(g.kind, g.cells.get(v)) for v in values]
        else:
            cells = [cell_text(g.kind, next(iter(g.cells.values()), None))]
        rows.append([f"{ICON.get(g.status, '')} {g.name}", *cells])
    return md_table(rows, headers=headers)


def entries_table(man: Manifest) -> str:
    rows = []
    for g in man.gates:
        for e in g.entries:
            what = f"{e.a_name} vs {e.b_name}" if e.is_pair else "metrics"
            ran = e.status in (Status.PASS, Status.FAIL)
            res = f"{e.matched}/{e.total}" if ran else ""
            if e.values:
                res = ", ".join(f"{k} {v}" for k, v in e.values.items())
            icon = ICON.get(e.status, "")
            rows.append([g.name, e.where, what, f"{icon} {res}".strip(), e.reason])
    return md_table(rows, headers=["gate", "arm", "compared", "result", "note"])


def arms_table(man: Manifest) -> str:
    rows = []
    arms = man.arms
    placed = any(a.device for a in arms)  # a GPU or a Ray node: a column naming it
    for a in arms:
        met = a.metrics or {}
        toks = sum(r.n for r in a.replies)
        rows.append(
            [
                a.id,
                (a.status or "?") + (" (cached)" if a.cached else ""),
                "" if a.wall_s is None else f"{a.wall_s:.1f}",
                len(a.replies) or "",
                toks or "",
                met.get("pages_in_use", ""),
                met.get("unplanned_allocations", ""),
                met.get("cached_pages", ""),
                *([a.device or ""] if placed else []),
            ]
        )
    return md_table(
        rows,
        headers=[
            "arm",
            "status",
            "wall s",
            "replies",
            "tokens",
            "pages in use",
            "unplanned",
            "cached pages",
            *(["ran on"] if placed else []),
        ],
    )


def machine_line(man: Manifest) -> str:
    mc = man.machine
    pk = mc.packages
    parts = [f"{mc.cpu}, {mc.cores} cores"]
    if mc.gpus:
        parts.append(", ".join(mc.gpus))
    parts.append(f"Python {mc.python}")
    parts += [
        f"{k} {v}" for k, v in pk.items() if k in ("numpy", "mlx", "cupy-cuda12x", "cupy-cuda13x")
    ]
    parts += [backend_facts_text(name, facts) for name, facts in mc.backends.items()]
    if mc.executor:  # where the arms ran, when not on this machine (gates/run/executors)
        parts.append(mc.executor)
    return " · ".join(parts)


FACT_NAMES = {
    "driver": "driver",
    "cuda_driver": "CUDA driver API",
    "cuda_runtime": "CUDA runtime",
    "cublas": "cuBLAS",
    "cupy": "CuPy",
}


def backend_facts_text(name: str, facts: dict[str, str]) -> str:
    """'cupy on NVIDIA H200 (driver 580.159.04, CUDA runtime 13.2, cuBLAS 13.1.0, ...)':
    what the engine reported in capabilities' backend_info (docs/contract.md, version 4)."""
    rest = [f"{FACT_NAMES.get(k, k)} {v}" for k, v in facts.items() if k != "gpu"]
    where = f" on {facts['gpu']}" if "gpu" in facts else ""
    return f"{name}{where} ({', '.join(rest)})" if rest else f"{name}{where}"


def _env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters["short"] = lambda s: (s or "")[:10]
    env.filters["duration"] = _duration
    env.filters["bullet"] = bullet
    env.filters["fence"] = fence
    env.filters["capped"] = lambda items, cap: items if cap is None else items[:cap]
    return env


def _duration(s: float) -> str:
    s = float(s)
    return f"{s:.0f}s" if s < 60 else f"{int(s // 60)}m {int(s % 60):02d}s"


MAX_MARKDOWN = 60_000  # GitHub refuses a PR body or comment over 65,536 characters


def markdown(man: Manifest, details: bool = True, cap: int | None = None) -> str:
    """The receipt. ``details``: with every comparison and per-arm data. ``cap``: at most
    this many items in each list (failing arms of a gate, crashes, skipped), the rest
    counted and left to the full report."""
    return (
        _env()
        .get_template("receipt.md.j2")
        .render(
            m=man,
            gate_table=gate_table(man),
            failures=failure_lines(man),
            crashed=crashed(man),
            skipped=skipped(man),
            notices=notices(man),
            lean=man.lean,
            lean_line=lean_line(man.lean),
            speed=man.speed,
            speed_table=speed_chart.table(man.speed),
            speed_chart=speed_chart.sweep_chart(man.speed),
            speed_summary=speed_chart.summary_line(man.speed),
            entries_table=entries_table(man),
            arms_table=arms_table(man),
            machine=machine_line(man),
            envs_line=envs.describe(man.environments),
            details=details,
            cap=cap,
            stem=file_stem(man),
            arms_line=arms_line(arm_counts(man.arms)),
            accepted=accept.lines(man),
        )
    )


def file_stem(man: Manifest) -> str:
    """<base>..<head>.<matrix>: a run of another matrix does not overwrite this one."""
    name = "".join(c if c.isalnum() or c in "-_" else "-" for c in man.matrix.name)
    return f"{man.base.sha[:10]}..{man.head.sha[:10]}.{name}"


CAPS = (12, 4, 1)  # list lengths tried, longest first, until the receipt fits


def write(manifest: JsonObject, out_dir: Path) -> tuple[Path, Path]:
    """The manifest's JSON as it is, and its receipt (read from it once, typed)."""
    man = Manifest.parse(manifest)
    out_dir.mkdir(parents=True, exist_ok=True)
    md, js = out_dir / f"{file_stem(man)}.md", out_dir / f"{file_stem(man)}.json"
    store.write_atomic(js, json.dumps(manifest, indent=1, sort_keys=False, default=str) + "\n")
    text = markdown(man)
    full = out_dir / f"{file_stem(man)}.full.md"
    if len(text) > MAX_MARKDOWN:  # the details go to a full report beside it
        store.write_atomic(full, text)
        text = markdown(man, details=False)
        for cap in CAPS:
            if len(text) <= MAX_MARKDOWN:
                break
            text = markdown(man, details=False, cap=cap)
        if len(text) > MAX_MARKDOWN:
            text = _cut(text, full.name)
    elif full.exists():
        full.unlink()
    store.write_atomic(md, text)
    return md, js


def _cut(text: str, full_name: str) -> str:
    """The last resort: cut at a line, closing a fence or <details> left open."""
    cut = text.rfind("\n", 0, MAX_MARKDOWN - 300)
    head = text[:cut]
    fences = re.findall(r"(?m)^( *`{3,})[ \t]*$", head)
    closing = f"\n{fences[-1]}" if len(fences) % 2 else ""
    opened = head.count("<details>") - head.count("</details>")
    closing += "\n\n</details>" * max(0, opened)
    return f"{head}{closing}\n\n… cut at {MAX_MARKDOWN} characters: see `{full_name}`\n"


def summary(man: Manifest, md_path: Path | None = None) -> str:
    lines = [
        f"Gates: {man.verdict} — head {man.head.sha[:10]} against base "
        f"{man.base.sha[:10]} (exit {man.exit_code})"
    ]
    for g in man.gates:
        cell = Cell(g.status, g.matched, g.total, _gate_counts(g))
        lines.append(f"  {ICON.get(g.status, '')} {g.name}: {cell_text(g.kind, cell)}")
    sp = man.speed
    if sp:
        why = sp.reason or speed_chart.summary_line(sp)
        lines.append(f"  speed: {sp.status}" + (f" ({why})" if why else ""))
    lean = man.lean
    if lean:
        lines.append(f"  lean: {lean_counts(lean)}")
    if md_path is not None:
        lines.append(f"receipt: {md_path}")
    return "\n".join(lines)


def _gate_counts(g: GateResult) -> dict[str, int]:
    states = [str(e.status) for e in g.entries]
    return {s: states.count(s) for s in set(states)}
