"""The executor seam without Ray: bad input names what to install, never a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import arm_config, run_gates

REPO = Path(__file__).resolve().parents[2]


def test_ray_missing_is_bad_input_naming_the_extra(stub_repo, monkeypatch, capsys):
    stub_repo.commit("head")
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    code, man, _ = run_gates(stub_repo, "--executor", "ray")
    err = capsys.readouterr().err.strip()
    assert (code, man) == (2, {})
    assert len(err.splitlines()) == 1 and "pip install -e '.[ray]'" in err, err


def test_an_address_without_ray_is_bad_input(stub_repo, capsys):
    stub_repo.commit("head")
    code, _, _ = run_gates(stub_repo, "--address", "auto")
    assert code == 2
    assert "--address is for --executor ray" in capsys.readouterr().err


def test_gates_imports_without_ray():
    """Ray is imported only by --executor ray: every module a plain run loads imports without."""
    code = (
        "import sys; sys.modules['ray'] = None; "
        "import gates.__main__, gates.pipeline, gates.run.executors"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_one_fingerprint_is_one_kind_and_a_configuration_keeps_to_one_kind():
    rx = pytest.importorskip("gates.run.executors.ray")  # needs Ray importable, not a cluster
    from gates.plan.build import Arm
    from gates.run.executors.worker import NodeFacts

    nodes = [
        {"NodeID": "a", "Resources": {"CPU": 16, "GPU": 8}},
        {"NodeID": "b", "Resources": {"CPU": 16, "GPU": 8}},
        {"NodeID": "c", "Resources": {"CPU": 8, "GPU": 4}},
        {"NodeID": "d", "Resources": {"CPU": 2}},
    ]
    fps = {"a": "h200", "b": "h200", "c": "a100", "d": "cpu"}
    facts = {n: NodeFacts(n, {"fp": fp}, fp) for n, fp in fps.items()}
    gpu = rx.kinds_of(nodes, facts, True)
    assert [(k.fp, k.nodes, k.capacity) for k in gpu] == [
        ("h200", ["a", "b"], 16),
        ("a100", ["c"], 4),
    ]
    assert [k.fp for k in rx.kinds_of(nodes, facts, False)] == ["h200", "a100", "cpu"]
    ex = object.__new__(rx.RayExecutor)
    ex.kinds = {True: gpu, False: []}
    seen = set()
    for p, kv, paging in [
        (p, kv, g) for p in (1, 2, 4, 8) for kv in ("bf16", "fp8") for g in ("off", "on", 24)
    ]:
        cfg = arm_config(backend="cupy", kv=kv, parallel=p, paging=paging)
        arms = [
            Arm(s, cfg.replace(drafter=d).canonical())
            for s in ("base", "head")
            for d in ("none", "noisy")
        ]
        kinds = {ex.fingerprint(a) for a in arms}  # both sides and the noisy twin
        assert len(kinds) == 1, cfg
        seen |= kinds
    assert seen == {"h200", "a100"}  # the groups spread over both kinds


def _two_runs(stub_repo, tmp_path, monkeypatch) -> tuple[Path, Path, Path, Path]:
    """The same matrix run twice on separate caches: (manifest, results) of each."""
    stub_repo.commit("head changes tokens at fp8", OUTPUT_SALT="h", LEAK_PAGES=1)
    got = []
    for name in ("one", "two"):
        monkeypatch.setenv("GATES_CACHE", str(tmp_path / name))
        code, man, _ = run_gates(stub_repo, matrix="matrices/t.yaml")
        assert code == 1 and man["matrix"]["ran"] > 0 and man["matrix"]["cached"] == 0
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(man))
        got += [path, tmp_path / name / "results"]
    return got[0], got[2], got[1], got[3]


def test_compare_two_equal_runs_then_a_planted_difference_of_each_kind(
    stub_repo, tmp_path, monkeypatch, capsys
):
    """Two runs of one matrix compare equal (timings and where they ran left out); a changed
    token id in a stored reply, a reply summary's hash, a gate verdict each show as one line."""
    from gates.run.executors import compare as cmp

    a, b, res_a, res_b = _two_runs(stub_repo, tmp_path, monkeypatch)
    capsys.readouterr()  # the runs' own summaries
    assert cmp.main([str(a), str(b), "--results", str(res_a), str(res_b)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("EQUAL: ") and " stored results in full" in out, out
    man = json.loads(b.read_text())
    arm = next(x for x in man["arms"] if x.get("replies"))
    # planted: one token id of one stored reply (the manifest's summary kept)
    entry = res_b / arm["key"][:2] / f"{arm['key']}.json"
    stored = json.loads(entry.read_text())
    stored["replies"][0]["ids"][-1] += 1
    stored["wall_s"] += 5.0  # a timing: not a difference
    entry.write_text(json.dumps(stored))
    assert cmp.main([str(a), str(b), "--results", str(res_a), str(res_b)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and f"arm {arm['id']}: stored.replies[0].ids[" in lines[0], lines
    assert cmp.main([str(a), str(b)]) == 0  # without --results the summaries are equal
    capsys.readouterr()
    # planted: a reply summary's token hash, and a gate's verdict
    arm["replies"][0]["token_sha"] = "0" * 12
    man["gates"][0]["status"] = "pass" if man["gates"][0]["status"] != "pass" else "fail"
    b.write_text(json.dumps(man))
    assert cmp.main([str(a), str(b)]) == 1
    out = capsys.readouterr().out
    assert f"arm {arm['id']}: replies[0].token_sha" in out
    assert f"gate {man['gates'][0]['name']!r}.status" in out


def test_compare_an_unreadable_manifest_is_bad_input(tmp_path, capsys):
    from gates.run.executors import compare as cmp

    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert cmp.main([str(bad), str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "bad.json" in err


def test_compare_reads_a_named_file_by_content_and_a_served_arms_counters_not_at_all(tmp_path):
    """A truth file at two paths with one content is equal, with another content not; a
    served arm's rounds may differ (when the server saw a hang-up), an offline arm's may not,
    nor a served arm's pages in use."""
    from gates.run.executors import compare as cmp

    a, b, c = (tmp_path / n for n in ("a.jsonl", "b.jsonl", "c.jsonl"))
    a.write_text('{"id": "x"}\n')
    b.write_text('{"id": "x"}\n')
    c.write_text('{"id": "y"}\n')

    def run(truth: Path, rounds: int, pages: int = 0) -> dict:
        metrics = {"rounds": rounds, "pages_in_use": pages, "config": {"drafter_model": str(truth)}}
        return {"status": "ok", "wall_s": rounds / 10, "replies": [], "metrics": metrics}

    def found(x: dict, y: dict, served: bool) -> list[str]:
        out: list[str] = []
        cmp.diff(cmp.as_run(x, served), cmp.as_run(y, served), "arm", out)
        return out

    assert found(run(a, 7), run(b, 7), served=False) == []
    assert [ln.split(":")[0] for ln in found(run(a, 7), run(c, 7), False)] == [
        "arm.metrics.config.drafter_model"
    ]
    assert found(run(a, 7), run(a, 9), served=True) == []
    assert found(run(a, 7), run(a, 9), served=False) == ["arm.metrics.rounds: 7 != 9"]
    assert found(run(a, 7), run(a, 7, pages=1), served=True) == ["arm.metrics.pages_in_use: 0 != 1"]
