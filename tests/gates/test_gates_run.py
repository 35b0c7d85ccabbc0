"""Refs, worktrees, the result store, crashes and not-comparable arms, show and clean."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import gate, git, hangs, run_gates, wait_until
from gates.__main__ import main

REPO = Path(__file__).resolve().parents[2]


def test_bad_refs_exit_2(stub_repo, capsys):
    assert run_gates(stub_repo, base="nope")[0] == 2
    assert "ref 'nope' does not exist" in capsys.readouterr().err
    assert run_gates(stub_repo, base="main", head="-rf")[0] == 2
    assert "may not be empty or start with '-'" in capsys.readouterr().err


def test_receipt_names_shas_and_merge_base(stub_repo):
    base = git(stub_repo.root, "rev-parse", "HEAD")
    git(stub_repo.root, "checkout", "-q", "-b", "side")
    head = stub_repo.commit("side", OUTPUT_SALT="")
    git(stub_repo.root, "checkout", "-q", "main")
    main_tip = stub_repo.commit("main moves on", LEAK_PAGES=0)
    code, man, md = run_gates(stub_repo, base="main", head="side")
    assert code == 0
    assert man["base"]["sha"] == main_tip and man["head"]["sha"] == head
    assert man["merge_base"] == base
    assert f"merge base `{base[:10]}`" in md
    assert f"--base {main_tip[:12]} --head {head[:12]}" in man["command"]


def test_worktree_head_sees_uncommitted_changes_without_touching_the_index(stub_repo):
    stub_repo.set_knobs(OUTPUT_SALT="dirty")
    (stub_repo.root / "untracked.txt").write_text("x")
    before = git(stub_repo.root, "status", "--porcelain")
    code, man, md = run_gates(stub_repo, base="main", head="WORKTREE")
    assert code == 1
    assert gate(man, "flags unset == main")["status"] == "fail"
    assert man["head"]["snapshot_of"] == git(stub_repo.root, "rev-parse", "HEAD")
    assert "WORKTREE (uncommitted changes on" in md
    assert git(stub_repo.root, "status", "--porcelain") == before
    # the same dirty tree is the same snapshot: nothing runs again
    code2, man2, _ = run_gates(stub_repo, base="main", head="WORKTREE")
    assert man2["head"]["sha"] == man["head"]["sha"] and man2["matrix"]["ran"] == 0


def test_second_run_runs_no_arm_and_no_cache_runs_all(stub_repo):
    stub_repo.commit("head", LEAK_PAGES=0, OUTPUT_SALT="h")
    code, man, _ = run_gates(stub_repo)
    assert man["matrix"]["ran"] == man["matrix"]["arms"] > 0
    code2, man2, md2 = run_gates(stub_repo)
    assert (code2, man2["matrix"]["ran"]) == (code, 0)
    assert man2["matrix"]["cached"] == man2["matrix"]["arms"]
    assert "from cache" in md2
    _, man3, _ = run_gates(stub_repo, "--no-cache")
    assert man3["matrix"]["ran"] == man3["matrix"]["arms"]


# `python -m gates` with Python's SIGINT handler: a process started from a background shell
# inherits SIGINT ignored, and Python then leaves it ignored (the run would never end)
WITH_SIGINT = (
    "import runpy, signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "runpy.run_module('gates', run_name='__main__', alter_sys=True)"
)


def test_interrupted_run_keeps_finished_arms(stub_repo, tmp_path):
    """Head's two fp8 arms hang (no timeout reaches them) and take both workers: every
    other arm has ended, and been stored, before the second starts to hang. SIGINT then
    exits 130 with those results kept and a receipt of them (the gates with an unfinished
    arm could not run), and the next run takes them from the store."""
    flag = tmp_path / "hang"
    stub_repo.hang_on(flag)
    stub_repo.commit("hangs while the flag file exists")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-c", WITH_SIGINT, "run", "--repo", str(stub_repo.root)]
    cmd += ["--base", "main~1", "--head", "main", "--matrix", "matrices/small.yaml"]
    cmd += ["--quiet", "--jobs", "2"]
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    results = Path(os.environ["GATES_CACHE"]) / "results"

    def stored() -> int:
        return sum(1 for p in results.rglob("*.json")) if results.exists() else 0

    try:
        wait_until(lambda: hangs(flag) == 2, proc, "2 hangs")
        # capabilities of base and head, base's 2 arms, head's 2 bf16 arms (plain, serial)
        assert stored() == 6
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=120) == 130
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert stored() == 6
    (partial,) = (stub_repo.root / "receipts").glob("*.json")
    man = json.loads(partial.read_text())
    assert "interrupted (Ctrl-C): 4 of 6 had run cleanly" in " ".join(man["notes"])
    assert (
        "skipped: the arms left when the run was interrupted"
        in partial.with_suffix(".md").read_text()
    )
    states = {g["status"] for g in man["gates"]}
    assert "could_not_run" in states and man["exit_code"] != 0, states
    killed = [a["id"] for a in man["arms"] if a.get("status") == "crashed"]
    assert not killed, f"arms the interrupt killed read as crashed: {killed}"
    assert man["verdict"].startswith("⚠️ could not run: 2 of 6 arms not run; "), man["verdict"]
    flag.unlink()
    code, man, _ = run_gates(stub_repo)
    assert code == 0
    assert man["matrix"]["cached"] == 4
    assert man["matrix"]["ran"] == man["matrix"]["arms"] - man["matrix"]["cached"] == 2


def test_crashed_arm_is_could_not_run_and_keeps_other_results(stub_repo):
    stub_repo.commit("fp8 crashes", CRASH_KV="fp8")
    code, man, md = run_gates(stub_repo)
    assert code == 3
    g = gate(man, "flags unset == main")
    assert g["cells"]["bf16"]["status"] == "pass"
    assert g["cells"]["fp8"]["status"] == "could_not_run"
    crashed = [a for a in man["arms"] if a.get("status") == "crashed"]
    assert crashed and all("kv=fp8" in a["id"] and a["side"] == "head" for a in crashed)
    assert "stub crash on kv fp8" in crashed[0]["stderr_tail"]
    assert "#### Could not run" in md and "engine exited 3" in md
    assert md.startswith("### Gates: ⚠️ could not run")


def test_a_failure_wins_over_a_crash(stub_repo):
    stub_repo.commit("fp8 crashes, bf16 changes", CRASH_KV="fp8", OUTPUT_SALT="y")
    code, man, _ = run_gates(stub_repo)
    assert code == 1


def test_timeout_is_could_not_run(stub_repo):
    m = (
        (stub_repo.root / "matrices" / "small.yaml")
        .read_text()
        .replace("timeout: 20", "timeout: 2")
    )
    (stub_repo.root / "matrices" / "fast.yaml").write_text(m)
    stub_repo.commit("hang", HANG_KV="fp8")
    t0 = time.monotonic()
    code, man, _ = run_gates(stub_repo, matrix="matrices/fast.yaml")
    assert time.monotonic() - t0 < 30
    assert code == 3
    reasons = {a["reason"] for a in man["arms"] if a.get("status") == "crashed"}
    assert reasons == {"timed out after 2s"}


def test_missing_capability_is_not_comparable(stub_repo):
    git(stub_repo.root, "checkout", "-q", "-b", "old")
    stub_repo.commit("an old engine without fp8", NO_KV=("fp8",))
    git(stub_repo.root, "checkout", "-q", "main")
    stub_repo.commit("head")
    code, man, md = run_gates(stub_repo, base="old", head="main")
    assert code == 0
    g = gate(man, "flags unset == main")
    assert g["cells"]["fp8"]["status"] == "not_comparable"
    assert g["cells"]["bf16"]["status"] == "pass"
    assert "not comparable: the base engine has no kv fp8" in md


def test_commit_without_engine_or_capabilities(stub_repo):
    git(stub_repo.root, "rm", "-q", "-r", "engine")
    stub_repo.commit("no engine")
    code, man, md = run_gates(stub_repo, base="main", head="main~1")
    assert code == 0, md  # head's own gates hold; nothing across commits to compare
    assert gate(man, "flags unset == main")["status"] == "not_comparable"
    assert gate(man, "concurrent == solo")["status"] == "pass"
    assert "base: the commit has no engine/" in md
    code, man, md = run_gates(stub_repo, base="main~1", head="main")
    assert code == 3 and "nothing could be compared" in md
    # a commit whose capabilities command fails counts as having nothing
    git(stub_repo.root, "checkout", "-q", "main~1", "--", "engine")
    stub_repo.commit("caps fail", FAIL_CAPABILITIES=True)
    code, man, md = run_gates(stub_repo, base="main~2", head="main")
    assert code == 3
    assert "capabilities --json` exited 3" in md


def test_engine_flags_axis_reaches_the_engine(stub_repo):
    m = (stub_repo.root / "matrices" / "small.yaml").read_text()
    m = m.replace("  paging: [on]\n", "  paging: [on]\n  flags: [{}, {ENGINE_SALT: s}]\n")
    m += "  - name: salted == plain\n    within_commit: {vary: flags, reference: {}}\n"
    (stub_repo.root / "matrices" / "flags.yaml").write_text(m)
    stub_repo.commit("flags matrix")
    code, man, _ = run_gates(stub_repo, matrix="matrices/flags.yaml")
    assert code == 1
    assert gate(man, "salted == plain")["status"] == "fail"
    assert gate(man, "flags unset == main")["status"] == "pass"  # compared with flags unset


def test_show_and_clean(stub_repo, capsys, tmp_path):
    stub_repo.commit("head")
    code, man, md = run_gates(stub_repo)
    capsys.readouterr()
    assert (
        main(["show", "--repo", str(stub_repo.root), str(stub_repo.root / "receipts" / "x.md")])
        == 2
    )
    found = next((stub_repo.root / "receipts").glob("*.json"))
    assert main(["show", str(found)]) == code
    assert capsys.readouterr().out == md
    assert main(["show", "--summary", "--repo", str(stub_repo.root)]) == code
    assert "Gates: ✅ all hold" in capsys.readouterr().out
    # the gates' worktrees are the cache's mirror's, never in the user's `git worktree list`
    assert git(stub_repo.root, "worktree", "list").count("\n") == 0
    mirrors = list((Path(os.environ["GATES_CACHE"]) / "mirrors").glob("*.git"))
    assert len(mirrors) == 1
    assert os.environ["GATES_CACHE"] in git(mirrors[0], "worktree", "list")
    assert main(["clean", "--repo", str(stub_repo.root)]) == 0
    assert git(stub_repo.root, "worktree", "list").count("\n") == 0
    assert not Path(os.environ["GATES_CACHE"]).exists()


def _touch_engine(stub_repo) -> None:
    main_py = stub_repo.root / "engine" / "__main__.py"
    main_py.write_text(main_py.read_text() + "# a change of the engine tree\n")
    stub_repo.commit("touch the engine")


def test_speed_gate_with_bench(stub_repo):
    m = (
        stub_repo.root / "matrices" / "small.yaml"
    ).read_text() + "speed: {blocks: 3, max_blocks: 4, add_blocks: 1, parallel: [1, 2]}\n"
    (stub_repo.root / "matrices" / "speed.yaml").write_text(m)
    stub_repo.commit("speed matrix")
    # the same engine tree on both sides: nothing to time
    code, man, md = run_gates(stub_repo, matrix="matrices/speed.yaml")
    assert code == 0 and man["speed"]["status"] == "not_run"
    assert "not run: base and head have the same engine/ tree" in md
    _touch_engine(stub_repo)
    code, man, md = run_gates(stub_repo, matrix="matrices/speed.yaml")
    assert code == 0
    assert man["speed"]["status"] == "pass"
    assert {c["verdict"] for c in man["speed"]["cells"]} == {"equivalent"}
    assert man["speed"]["blocks"] == 3  # nothing inconclusive: no block added
    sides = [[r["side"] for r in s["runs"]] for s in man["speed"]["samples"]]
    # turn about: the order alternates by stream count, repeat and block
    assert sides[0] == ["base", "head", "head", "base", "head", "base", "base", "head"]
    assert sides[1] == ["head", "base", "base", "head", "base", "head", "head", "base"]
    assert all(s["load_before"] is not None for s in man["speed"]["samples"])
    assert "decode (tok/s) at 2 streams" in md
    assert "xychart-beta" in md
    _, man, _ = run_gates(stub_repo, "--no-speed", matrix="matrices/speed.yaml")
    assert man["speed"] is None


def test_speed_not_comparable_without_bench(stub_repo):
    main_py = stub_repo.root / "engine" / "__main__.py"
    no_bench = "b = argparse.ArgumentParser()  # no bench command"
    main_py.write_text(main_py.read_text().replace('b = sub.add_parser("bench")', no_bench))
    m = (
        stub_repo.root / "matrices" / "small.yaml"
    ).read_text() + "speed: {runs: 1, parallel: [1, 2]}\n"
    (stub_repo.root / "matrices" / "speed.yaml").write_text(m)
    stub_repo.commit("no bench")
    code, man, md = run_gates(stub_repo, matrix="matrices/speed.yaml")
    assert code == 0
    assert man["speed"]["status"] == "not_comparable"
    assert "engine bench --lockstep refused (exit 2)" in md, man["speed"]["reason"]
    assert "invalid choice: 'bench'" in md


def test_speed_not_comparable_before_bench_schema(stub_repo, monkeypatch):
    monkeypatch.setenv("STUB_OLD_BENCH", "1")
    m = (
        stub_repo.root / "matrices" / "small.yaml"
    ).read_text() + "speed: {blocks: 1, parallel: [1, 2]}\n"
    (stub_repo.root / "matrices" / "speed.yaml").write_text(m)
    stub_repo.commit("old bench")
    _touch_engine(stub_repo)
    code, man, md = run_gates(stub_repo, matrix="matrices/speed.yaml")
    assert code == 0
    assert man["speed"]["status"] == "not_comparable"
    assert "unrecognized arguments: --lockstep" in md


def test_selftest_on_stub(stub_repo, capsys):
    code = main(
        [
            "selftest",
            "--repo",
            str(stub_repo.root),
            "--model",
            "fixtures/models/stub",
            "--prompts",
            "t",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert "positive control" in out and "The harness can see a difference." in out


def test_lean_reports_only_new_problems(stub_repo, capsys):
    (stub_repo.root / "pyproject.toml").write_text('[tool.ruff.lint]\nselect = ["F"]\n')
    (stub_repo.root / "old.py").write_text("import os\n")
    stub_repo.commit("an old problem")
    (stub_repo.root / "old.py").write_text("\n\nimport os\n")  # moved, not new
    (stub_repo.root / "new.py").write_text("import sys\n")
    stub_repo.commit("a new problem")
    code = main(["lean", "--repo", str(stub_repo.root), "--base", "main~1", "--head", "main"])
    out = capsys.readouterr().out
    assert code == 1, out
    assert "1 inherited, 1 new" in out and "new.py:1:8: F401" in out and "old.py" not in out


def test_lean_in_the_receipt_matches_by_rule_file_and_message_not_line(stub_repo):
    (stub_repo.root / "pyproject.toml").write_text(
        '[tool.ruff]\nline-length = 100\n[tool.ruff.lint]\nselect = ["F", "E501"]\n'
    )
    (stub_repo.root / "old.py").write_text(f"import os\nx = '{'a' * 100}'\n")
    stub_repo.commit("two old problems")
    # moved, and the long line longer: still inherited; new.py's unused import is new
    (stub_repo.root / "old.py").write_text(f"\n\nimport os\nx = '{'a' * 120}'\n")
    (stub_repo.root / "new.py").write_text("import sys\n")
    stub_repo.commit("a new problem")
    code, man, md = run_gates(stub_repo)
    assert code == 0, md  # lean does not change the exit code: the lint session does that
    lean = man["lean"]
    assert (lean["status"], lean["new"], lean["fixed"]) == ("fail", 1, 0), lean
    assert lean["inherited"] >= 2
    assert [(p["file"], p["code"]) for p in lean["problems"]] == [("new.py", "F401")]
    assert f"{lean['inherited']} inherited, 1 new" in md and "`new.py:1:8` F401" in md
    _, man, md = run_gates(stub_repo, "--no-lean")
    assert man["lean"] is None and "#### Lean" not in md


def test_refused_arm_is_not_comparable_unless_the_other_commit_ran_it(stub_repo):
    stub_repo.commit("both refuse fp8", REFUSE_KV="fp8")
    stub_repo.commit("head too")
    code, man, md = run_gates(stub_repo)  # a whole axis value neither commit runs: not green
    assert code == 2, md
    g = gate(man, "flags unset == main")
    assert g["cells"]["fp8"]["status"] == "not_comparable"
    assert "axes.kv: 'fp8' ran on neither commit: refused (exit 2): error: --kv fp8" in md
    code, man, md = run_gates(stub_repo, base="main~2", head="main")
    assert code == 3
    g = gate(man, "flags unset == main")
    assert g["cells"]["fp8"]["status"] == "could_not_run"
    assert "(the other commit ran it)" in md
