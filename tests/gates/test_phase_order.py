"""The gate runner's folders are its pipeline: plan -> run -> judge -> report.

Every module of ``gates/`` is read with ``ast`` (imports inside functions count too). A
module imports only modules of its own phase or an earlier one, and no two modules import
each other, directly or round a circle. The package root (``gates/__init__.py``: BadInput,
exit codes; ``gates/jsontypes.py``: the type of JSON at the edges)
is below every phase; the tools that drive the whole pipeline (the CLI, the
pipeline itself, selftest, bisect, speed calibration, the power check) are above every phase.
"""

from __future__ import annotations

import ast
from pathlib import Path

GATES = Path(__file__).resolve().parents[2] / "gates"
PHASES = ("root", "plan", "run", "judge", "report", "tools")
ROOT = {"gates.jsontypes"}  # the type of JSON at the edges: below every phase, like BadInput


def module_name(path: Path, root: Path = GATES) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def phase(module: str) -> int:
    """Where a module stands: ``gates`` itself, a phase package, or a tool."""
    parts = module.split(".")
    if len(parts) == 1 or module in ROOT:
        return PHASES.index("root")
    if parts[1] in PHASES[1:-1]:
        return PHASES.index(parts[1])
    return PHASES.index("tools")


def modules(root: Path = GATES) -> dict[str, ast.Module]:
    return {
        module_name(p, root): ast.parse(p.read_text(), str(p)) for p in sorted(root.rglob("*.py"))
    }


def imports(tree: ast.Module, known: set[str]) -> set[str]:
    """The ``gates`` modules a module imports, anywhere in it (``from gates.x import y``
    names module ``gates.x.y`` when there is one, else ``gates.x``)."""

    def nearest(name: str) -> str:
        while name not in known and "." in name:
            name = name.rpartition(".")[0]
        return name

    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {nearest(a.name) for a in node.names if a.name.split(".")[0] == "gates"}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] != "gates":
                continue
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                out.add(sub if sub in known else nearest(node.module))
    return out


def graph(root: Path = GATES) -> dict[str, set[str]]:
    trees = modules(root)
    known = set(trees)
    return {m: imports(t, known) - {m} for m, t in trees.items()}


def upward(g: dict[str, set[str]]) -> list[str]:
    return sorted(
        f"{m} ({PHASES[phase(m)]}) imports {d} ({PHASES[phase(d)]})"
        for m, deps in g.items()
        for d in deps
        if phase(d) > phase(m)
    )


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(g.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def test_every_module_has_a_phase_folder():
    """Nothing but the root and the tools sits outside the four phase packages."""
    tools = {"gates.__main__", "gates.pipeline", "gates.selftest", "gates.bisect"}
    tools |= {"gates.speed_calibrate"}
    loose = sorted(
        m
        for m in graph()
        if phase(m) == PHASES.index("tools") and m not in tools and not m.startswith("gates.power")
    )
    assert loose == []


def test_no_module_imports_a_later_phase():
    assert upward(graph()) == []


def test_no_import_cycles():
    assert cycles(graph()) == []


def test_the_checks_see_what_they_should(tmp_path):
    """An upward import in a function body and a circle of two modules are both found."""
    pkg = tmp_path / "gates"
    for name, text in {
        "__init__.py": "",
        "plan/__init__.py": "",
        "plan/a.py": "def f():\n    from gates.report import b\n",
        "report/__init__.py": "",
        "report/b.py": "from gates.report import c\n",
        "report/c.py": "import gates.report.b\n",
    }.items():
        (pkg / name).parent.mkdir(parents=True, exist_ok=True)
        (pkg / name).write_text(text)
    g = graph(pkg)
    assert upward(g) == ["gates.plan.a (plan) imports gates.report.b (report)"]
    assert cycles(g) == [["gates.report.b", "gates.report.c"]]
