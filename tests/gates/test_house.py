"""The house rules of gates/ and engine/: files under 400 lines, functions under 60.

A function's length runs from its ``def`` line to its last line (decorators not counted,
its docstring counted). LONG names the few that are over, and why; one that gets short
enough must leave LONG, and a new long one fails here.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("gates", "engine")
MAX_FILE = 400
MAX_FUNCTION = 60

# "path:function": why it stays long for now
LONG: dict[str, str] = {}


def _sources() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def long_functions(path: Path, root: Path = ROOT) -> dict[str, int]:
    """ "path:function" -> lines, for the functions of ``path`` over MAX_FUNCTION lines."""
    out = {}
    rel = path.relative_to(root).as_posix()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            n = (node.end_lineno or node.lineno) - node.lineno + 1
            if n > MAX_FUNCTION:
                out[f"{rel}:{node.name}"] = n
    return out


def test_files_stay_under_400_lines():
    long = {}
    for p in _sources():
        n = len(p.read_text().splitlines())
        if n > MAX_FILE:
            long[p.relative_to(ROOT).as_posix()] = n
    assert long == {}


def test_functions_stay_under_60_lines():
    found = {k: n for p in _sources() for k, n in long_functions(p).items()}
    assert {k: n for k, n in found.items() if k not in LONG} == {}, "split these into phases"
    assert sorted(k for k in LONG if k not in found) == [], "short now: remove from LONG"


def test_the_check_sees_a_long_function(tmp_path):
    lines = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION - 1))
    (tmp_path / "planted.py").write_text(
        f"def fits():\n{lines}\n\ndef over():\n{lines}    return 0\n"
    )
    assert long_functions(tmp_path / "planted.py", tmp_path) == {
        "planted.py:over": MAX_FUNCTION + 1
    }
