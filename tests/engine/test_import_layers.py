"""The engine's imports point down its layers (docs/architecture.md), close no circle, and
never reach into gates/, bench/ or tests/. Read with `ast` from engine/**/*.py: imports inside
functions count, and so does a module named in a string (the drafter registry's factories).

`python tests/engine/test_import_layers.py` prints the figures: modules, arrows, arrows that
climb a layer, and the modules in circles."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ENGINE = ROOT / "engine"

# Bottom first. A module may import modules of its own layer and of any layer below it.
LAYERS: tuple[str, ...] = (
    "engine.errors",  # the two exceptions every layer raises
    "engine.kv",  # row encodings, page plan, memory budget (numpy only)
    "engine.config",  # EngineConfig: the one home of the engine's knobs and their defaults
    "engine.ops",  # backends: numpy, mlx, cupy
    "engine.model",  # config.json, weights, the Qwen3 (and MoE) forward, the fake model
    "engine.draft",  # drafters
    "engine.lanes",  # the engine: requests, streams, scheduling, sampling, replies
    "engine.serve",  # the HTTP server around an engine
    "engine.cli",  # the command lines (run, generate, bench, serve, capabilities)
    "engine.__main__",
)

# Known edges against the rules, each with a line on who removes it. Empty since graph capture
# moved behind the ops seam (Ops.run_graph: ops see named host inputs, never a model or a KV
# memory's attributes); a new entry needs a reason, and the stale-entry test below goes red
# when its import is gone.
KNOWN_UPWARD: frozenset[tuple[str, str]] = frozenset()

FORBIDDEN_ROOTS = ("gates", "bench", "tests")
MODULE_STRING = re.compile(r"^engine(\.\w+)+(?=(:\w+)?$)")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def all_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(ENGINE.rglob("*.py"))}


def imported_names(path: Path, name: str) -> list[str]:
    """Every absolute module name that `path` (module `name`) imports or names in a string."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found += [f"{target}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            hit = MODULE_STRING.match(node.value)
            if hit:
                found.append(hit.group(0))
    return found


def import_graph(modules: dict[str, Path]) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(arrows between engine modules, imports of forbidden roots) per module. A name points at
    the longest module it starts with: `from a import b` at a.b where b is a module, else a."""
    arrows: dict[str, set[str]] = {m: set() for m in modules}
    forbidden: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        for target in imported_names(path, name):
            root = target.split(".")[0]
            if root in FORBIDDEN_ROOTS:
                forbidden[name].add(target)
            elif root == "engine":
                while target not in modules and "." in target:
                    target = target.rpartition(".")[0]
                if target != name and target != "engine":
                    arrows[name].add(target)
    return arrows, forbidden


def layer_of(module: str) -> int:
    for i, prefix in enumerate(LAYERS):
        if module == prefix or module.startswith(prefix + "."):
            return i
    return -1


def upward(arrows: dict[str, set[str]]) -> set[tuple[str, str]]:
    return {(a, b) for a, bs in arrows.items() for b in bs if layer_of(b) > layer_of(a)}


def circles(arrows: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of two modules or more (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for start in sorted(arrows):
        if start in index:
            continue
        work = [(start, iter(sorted(arrows[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        top = stack.pop()
                        on_stack.discard(top)
                        component.append(top)
                        if top == node:
                            break
                    if len(component) > 1:
                        out.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(arrows.get(child, ())))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return out


def without_known(arrows: dict[str, set[str]]) -> dict[str, set[str]]:
    return {a: {b for b in bs if (a, b) not in KNOWN_UPWARD} for a, bs in arrows.items()}


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    arrows, _ = import_graph(all_modules())
    return arrows


def test_every_module_has_a_layer() -> None:
    unplaced = [m for m in all_modules() if m != "engine" and layer_of(m) < 0]
    assert not unplaced, f"place these in LAYERS (and docs/architecture.md): {unplaced}"


def test_no_arrow_climbs_a_layer(graph: dict[str, set[str]]) -> None:
    climbs = sorted(upward(without_known(graph)))
    assert not climbs, "imports from a lower layer to a higher one:\n" + "\n".join(
        f"  {a} -> {b}" for a, b in climbs
    )


def test_no_circle_of_imports(graph: dict[str, set[str]]) -> None:
    found = circles(without_known(graph))
    assert not found, f"modules that import each other in a circle: {found}"


def test_engine_never_imports_gates_bench_or_tests() -> None:
    _, forbidden = import_graph(all_modules())
    bad = {m: sorted(t) for m, t in forbidden.items() if t}
    assert not bad, f"engine must stand alone: {bad}"


def test_known_edges_still_exist(graph: dict[str, set[str]]) -> None:
    """An allow-list entry whose import is gone is stale: empty it (KNOWN_UPWARD's comment)."""
    stale = sorted((a, b) for a, b in KNOWN_UPWARD if b not in graph.get(a, set()))
    assert not stale, f"remove from KNOWN_UPWARD, the import is gone: {stale}"


def test_the_reader_sees_lazy_string_and_relative_imports(tmp_path: Path) -> None:
    """The graph's reader on a planted file: an import inside a function, a module named in a
    string, a relative import and a forbidden root are all seen."""
    src = tmp_path / "engine" / "kv" / "planted.py"
    src.parent.mkdir(parents=True)
    src.write_text(
        "def f():\n"
        "    from engine.lanes import engine\n"
        "    import gates.run\n"
        "FACTORY = 'engine.draft.oracle:OracleDrafter'\n"
        "from . import codec\n"
    )
    got = imported_names(src, "engine.kv.planted")
    assert {"engine.lanes.engine", "gates.run", "engine.draft.oracle", "engine.kv.codec"} <= set(
        got
    )


def figures() -> dict[str, object]:
    arrows, _ = import_graph(all_modules())
    return {
        "modules": len(arrows),
        "arrows": sum(len(b) for b in arrows.values()),
        "climbs": sorted(upward(arrows)),
        "circles": circles(arrows),
    }


if __name__ == "__main__":
    for key, value in figures().items():
        print(f"{key}: {value}", file=sys.stdout)
