"""No typed module of gates/ hands on a result as a plain dict.

The modules in TYPED produce or read gate results; every function in them (public or
not) is checked through ``typing.get_type_hints``: none may take or return a bare
``dict[str, Any]`` (or a list of them) except the names in ALLOWED, which are manifests or
records for a template, not results. A module moved over to the typed results joins TYPED.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import typing
from typing import Any

import pytest

from gates.jsontypes import JsonObject
from gates.judge.results import GateResult, gates_of
from gates.run.results import Status

TYPED = (
    "gates.run.results",
    "gates.judge.results",
    "gates.judge.evaluate",
    "gates.report.receipt.lists",
    "gates.report.receipt.render",
    "gates.report.receipt.failures",
    "gates.run.validate",
    "gates.power.run",
    "gates.run.execute",
    "gates.run.served",
    "gates.run.store",
    "gates.run.arms",
    "gates.selftest",
    "gates.judge.checks.equality",
    "gates.judge.diffs",
    "gates.judge.checks.client",
    "gates.judge.checks.resources",
    "gates.judge.checks.schedule",
    "gates.judge.checks.acceptance",
    "gates.pipeline",
    "gates.report.manifest",
    "gates.run.shard",
    "gates.report.merge",
    "gates.run.speed.results",
    "gates.run.speed.stats",
    "gates.run.speed.measure",
    "gates.run.speed.estimate",
    "gates.report.speed_chart",
    "gates.speed_calibrate",
    "gates.bisect",
    "gates.run.speed.lockstep",
    "gates.run.speed.schema",
    "gates.plan.arm_config",
    "gates.run.contract",
    "gates.plan.planned",
    "gates.plan.point",
    "gates.plan.request",
    "gates.plan.prompts",
    "gates.plan.rule",
    "gates.plan.build",
    "gates.judge.kinds.lengths",
    "gates.judge.kinds.resumed",
    "gates.judge.kinds.schedule",
    "gates.run.reply",
    "gates.run.capabilities",
    "gates.run.envs",
    "gates.run.executors.ship",
    "gates.run.executors.worker",
    "gates.report.view",
    "gates.report.receipt.headline",
    "gates.report.receipt.counts",
    "gates.report.accept",
    "gates.run.info",
)

# (module, function, parameter or "return"): what the dict is, since it is not a result
# none left: the manifest is read through report/view.Manifest.parse, the run's facts are a
# RunInfo (gates/run/info.py), and JSON read or written says JsonObject (JSON_ALLOWED below)
ALLOWED: dict[tuple[str, str, str], str] = {}

DICT = dict[str, Any]
# JsonObject (gates/jsontypes.py) marks JSON at the edge where it is read or written: only
# functions of these names may take or give one, and the few in JSON_ALLOWED (with a reason)
JSON_EDGES = {"to_json", "from_json", "load", "dump", "read", "write", "parse", "canonical"}
JSON_ALLOWED: dict[tuple[str, str, str], str] = {
    ("gates.run.results", "status_of", "d"): "from_json's reader of a status field",
    ("gates.run.results", "need", "d"): "from_json's reader of a field that must be there",
    ("gates.run.results", "as_json", "return"): "to_json's writer of a flat dataclass's fields",
    ("gates.run.results", "*", "man"): "a manifest as written to disk: typed/arms_of read its "
    "lists once into typed rows",
    ("gates.run.results", "__init__", "trace"): "the engine's schedule trace, kept as it wrote "
    "it (the store's bytes); judge/checks/schedule reads it once into TraceRows",
    ("gates.run.served", "_chunk_problem", "d"): "one streamed chunk as the openai client dumps "
    "it, checked where _streamed reads it",
    ("gates.power.run", "failed_gates", "manifest"): "a manifest read from disk, its gates "
    "and speed read through gates_of and speed_of",
    ("gates.run.executors.worker", "__init__", "machine"): "a node's machine as store.machine "
    "describes it, written into the manifest as it is",
    ("gates.report.accept", "apply", "man"): "the manifest's JSON, its speed cells and "
    "acceptances marked before it is written (and parsed into a Manifest)",
    ("gates.judge.results", "gates_of", "man"): "a manifest as read: Manifest.parse (and "
    "bisect) read its gates once into GateResults",
    ("gates.run.speed.results", "speed_of", "man"): "a manifest as read: Manifest.parse (and "
    "power) read its speed section once into a SpeedRun",
    ("gates.run.store", "fingerprint", "m"): "the machine's JSON (store.machine, as the "
    "manifest records it), hashed",
    **{
        ("gates.run.info", "__init__", p): "JSON a run records as it was written (a node's "
        "machine, the executor's record, the speed and lean sections' to_json, the shards' "
        "records): a shard manifest or the manifest writes it as it is"
        for p in ("machine", "executor", "speed", "lean", "shards")
    },
    ("gates.report.merge", "*", "docs"): "shard manifests: JSON read from disk (merge.load)",
    ("gates.report.merge", "check_inputs", "first"): "a shard manifest: JSON read from disk",
    ("gates.run.store", "arm_key", "config"): "JSON being hashed into the key: ArmConfig.to_json "
    "and what joins it (the served client's version, the plain twin's key)",
}


def holds_json(hint: Any) -> bool:
    return hint == JsonObject or any(holds_json(a) for a in typing.get_args(hint))


def holds_dict(hint: Any) -> bool:
    """A bare ``dict[str, Any]``, alone or inside another type (a list of them, one per
    arm, one or None, ...). A JsonObject is not one: where it may be, json_off_the_edge says."""
    if hint == JsonObject:
        return False
    return hint == DICT or any(holds_dict(a) for a in typing.get_args(hint))


def _functions(modname: str) -> list[tuple[str, Any]]:
    mod = importlib.import_module(modname)
    out = []
    for name, obj in vars(mod).items():
        if inspect.isfunction(obj) and obj.__module__ == modname:
            out.append((name, obj))
        elif inspect.isclass(obj) and obj.__module__ == modname:
            for mname, meth in vars(obj).items():
                fn = meth.__func__ if isinstance(meth, classmethod) else meth
                if inspect.isfunction(fn):
                    out.append((f"{name}.{mname}", fn))
    return out


def _allowed(modname: str, fname: str, param: str) -> bool:
    short = fname.rsplit(".", 1)[-1]
    return any((modname, f, param) in ALLOWED for f in (fname, short, "*"))


def untyped(modnames: tuple[str, ...] = TYPED) -> list[str]:
    bad = []
    for modname in modnames:
        for fname, fn in _functions(modname):
            hints = typing.get_type_hints(fn)
            for param, hint in hints.items():
                if holds_dict(hint) and not _allowed(modname, fname, param):
                    bad.append(f"{modname}.{fname}: {param} is {hint}")
    return bad


def test_typed_modules_pass_no_result_dict():
    assert untyped() == []


def json_off_the_edge(modnames: tuple[str, ...] = TYPED) -> list[str]:
    bad = []
    for modname in modnames:
        for fname, fn in _functions(modname):
            short = fname.rsplit(".", 1)[-1]
            for param, hint in typing.get_type_hints(fn).items():
                allowed = any((modname, f, param) in JSON_ALLOWED for f in (fname, short, "*"))
                if holds_json(hint) and short not in JSON_EDGES and not allowed:
                    bad.append(f"{modname}.{fname}: {param} is JSON off the edge")
    return bad


def test_json_objects_stay_at_the_edge(tmp_path, monkeypatch):
    """JsonObject only where JSON is read or written; a planted inner function is caught."""
    assert json_off_the_edge() == []
    (tmp_path / "planted_json.py").write_text(
        "from __future__ import annotations\nfrom gates.jsontypes import JsonObject\n\n"
        "def to_json() -> JsonObject:\n    return {}\n\n"
        "def judge(row: JsonObject) -> bool:\n    return True\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert json_off_the_edge(("planted_json",)) == ["planted_json.judge: row is JSON off the edge"]


def test_every_allowance_is_still_used():
    """An allowance whose function or parameter went (typed, renamed, moved) is struck off."""
    used = set()
    for modname in TYPED:
        for fname, fn in _functions(modname):
            for param, hint in typing.get_type_hints(fn).items():
                if holds_dict(hint):
                    short = fname.rsplit(".", 1)[-1]
                    used |= {(modname, f, param) for f in (fname, short, "*")}
    assert sorted(set(ALLOWED) - used) == []


def test_the_check_sees_a_result_dict(tmp_path, monkeypatch):
    """The check is not vacuous: a module whose function returns a dict result is caught."""
    (tmp_path / "planted_mod.py").write_text(
        "from __future__ import annotations\nfrom typing import Any\n\n"
        "def entry(column: str) -> dict[str, Any]:\n    return {'status': 'pass'}\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert untyped(("planted_mod",)) == ["planted_mod.entry: return is dict[str, typing.Any]"]


def test_evaluate_produces_typed_gates():
    from gates.judge import evaluate

    hints = typing.get_type_hints(evaluate.evaluate)
    assert hints["return"] == list[GateResult]


def test_the_renderer_refuses_anything_but_a_gate_result_or_its_json():
    with pytest.raises(TypeError):
        gates_of({"gates": [["g", Status.PASS]]})


def test_run_arm_and_run_served_return_an_arm_run():
    from gates.run import execute, served
    from gates.run.results import ArmRun

    for fn in (execute.run_arm, served.run_served, execute._started):
        assert typing.get_type_hints(fn)["return"] is ArmRun, fn.__name__


def test_the_checks_take_an_arm_run():
    from gates.judge.checks import acceptance, equality, resources, schedule
    from gates.run.results import ArmRun

    for fn in (equality.compare, acceptance.compare, schedule.compare):
        hints = typing.get_type_hints(fn)
        assert hints["a"] is ArmRun and hints["b"] is ArmRun, fn.__module__
    for fn in (resources.check, schedule.check, acceptance.rate):
        assert typing.get_type_hints(fn)["result"] is ArmRun, fn.__module__


def test_a_stored_run_reads_back_and_a_bad_entry_is_a_clean_miss(tmp_path):
    """An entry as the store held it before ArmRun (same keys, ``device``/``trace`` null)
    reads back equal; one that is JSON but no arm run is removed and counted, not raised."""
    from gates.run.execute import stored_run
    from gates.run.results import ArmRun
    from gates.run.store import Store

    st = Store(tmp_path)
    old = {
        **{"status": "ok", "exit_code": 0, "wall_s": 1.5, "argv": "python -m engine run"},
        **{"stderr_tail": "", "reason": "", "device": None, "trace": None, "metrics": {"a": 1}},
        **{"replies": [{"id": "r", "ids": [1, 2]}], "harness": "7", "finished_at": "t"},
    }
    st.write("ab" * 32, old)
    run = stored_run(st, "ab" * 32)
    assert run == ArmRun.from_json(old) and run is not None and run.ok
    assert run.to_json()["replies"] == old["replies"] and run.metrics == {"a": 1}
    assert run.trace is None
    assert ArmRun.from_json(run.to_json()) == run
    st.write("cd" * 32, {"status": "finished", "replies": []})  # not an arm's status
    st.write("ef" * 32, {"status": "ok", "replies": "none"})  # replies not a list
    assert stored_run(st, "cd" * 32) is None and stored_run(st, "ef" * 32) is None
    assert st.corrupt == ["cd" * 32, "ef" * 32]
    assert st.read("cd" * 32) is None and st.corrupt == ["cd" * 32, "ef" * 32]  # removed


PROSE = ("reason", "arm_reason", "notice", "stderr_tail")  # text for people, not for code


def prose_reads(src: str) -> list[str]:
    """Where code matches text in a prose field: ``"x" in e.reason``, ``e.reason ==
    "..."``, ``e.reason.startswith(...)`` and the like."""

    def prose(node: ast.AST) -> bool:
        if isinstance(node, ast.Attribute):
            return node.attr in PROSE
        if isinstance(node, ast.Subscript | ast.Call):  # d["reason"], d.get("reason")
            return any(isinstance(c, ast.Constant) and c.value in PROSE for c in ast.walk(node))
        return False

    out = []
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.Compare) and any(
            isinstance(op, ast.In | ast.NotIn | ast.Eq | ast.NotEq) for op in node.ops
        ):
            sides = [node.left, *node.comparators]
            if any(prose(s) for s in sides) and any(isinstance(s, ast.Constant) for s in sides):
                out.append(ast.unparse(node))
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("startswith", "endswith", "find", "index", "count")
            and prose(node.func.value)
        ):
            out.append(ast.unparse(node))
    return out


def test_the_renderer_reads_fields_never_prose():
    from pathlib import Path

    import gates.report.receipt

    folder = Path(gates.report.receipt.__file__).parent
    found = {p.name: prose_reads(p.read_text()) for p in sorted(folder.glob("*.py"))}
    assert {k: v for k, v in found.items() if v} == {}
    planted = 'if "(the other commit ran it)" in e.reason:\n    pass\n'
    assert prose_reads(planted) == ["'(the other commit ran it)' in e.reason"]
    assert prose_reads('ok = d.get("reason", "").startswith("the engine reports no")\n')
