"""bench --json and --lockstep (schema 2); ENGINE_CALIBRATE_SLOWDOWN costs time, not tokens."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from engine.__main__ import main
from engine.cli.capabilities import capabilities
from engine.errors import InputError
from engine.lanes import calibrate

MODEL = str(Path(__file__).resolve().parents[2] / "fixtures" / "models" / "tiny-qwen3")
ROW_KEYS = {
    "parallel",
    "decode_tok_s",
    "prefill_tok_s",
    "ttft_ms",
    "cpu_s_per_token",
    "decode_cpu_s_per_token",
    "prefill_cpu_s_per_token",
    "wall_s",
    "cpu_s",
    "generated_tokens",
}


def _bench(capsys, *extra: str) -> dict:
    argv = ["bench", "--json", "--model", MODEL, "--prompt-tokens", "8", "--gen-tokens", "4"]
    assert main([*argv, "--repeats", "1", *extra]) == 0
    return json.loads(capsys.readouterr().out)


def test_bench_schema_2(capsys):
    out = _bench(capsys, "--parallel", "1,2")
    assert out["bench_schema"] == 2
    assert [r["parallel"] for r in out["sweep"]] == [1, 2]
    for r in out["sweep"]:
        assert set(r) >= ROW_KEYS
        assert r["generated_tokens"] == 4 * r["parallel"]
        assert r["cpu_s_per_token"] > 0 and r["decode_tok_s"] > 0 and r["ttft_ms"] > 0
    assert {"cpu", "cores", "threads", "python", "numpy"} <= set(out["machine"])
    assert {"cpu_s", "wall_s", "loadavg_start", "loadavg_end"} <= set(out["process"])
    assert "actions" not in out["sweep"][0]  # per-action samples are for --lockstep


def test_lockstep_answers_one_run_per_line(monkeypatch, capsys):
    lines = '{"parallel": 2}\nnot json\n{"parallel": 0}\n\n{"parallel": 1}\n'
    monkeypatch.setattr("sys.stdin", io.StringIO(lines))
    argv = ["bench", "--lockstep", "--model", MODEL, "--prompt-tokens", "8", "--gen-tokens", "4"]
    assert main(argv) == 0
    got = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert got[0]["ready"] is True and got[0]["bench_schema"] == 2 and "machine" in got[0]
    assert "error" in got[2] and "parallel" in got[3]["error"]
    two, one = got[1], got[4]
    assert (two["parallel"], one["parallel"], len(got)) == (2, 1, 5)
    for run, n in ((two, 2), (one, 1)):
        acts = run["actions"]
        assert set(ROW_KEYS) <= set(run)
        assert len({len(v) for v in acts.values()}) == 1
        rounds = [i for i, k in enumerate(acts["kind"]) if k == "round"]
        # every token is made once: the first by a prompt step, the rest by rounds
        assert sum(acts["tokens"]) == 4 * n == run["generated_tokens"]
        assert sum(acts["tokens"][i] for i in rounds) == 3 * n
        assert sum(acts["rows"][i] for i, k in enumerate(acts["kind"]) if k != "round") == 8 * n
        assert all(c > 0 for c in acts["cpu_s"]) and all(w > 0 for w in acts["wall_s"])


def test_lockstep_turns_step_one_run(monkeypatch, capsys):
    # a run of 2 streams, 2 prompt tokens, 3 generated: 2 prompt steps and 2 rounds
    lines = ['{"parallel": 2, "turn": 1}'] * 2 + ['{"parallel": 1, "turn": 1}']
    lines += ['{"parallel": 2, "turn": 5}', '{"parallel": 2, "turn": 0}', '{"parallel": 1}']
    monkeypatch.setattr("sys.stdin", io.StringIO("\n".join(lines) + "\n"))
    argv = ["bench", "--lockstep", "--model", MODEL, "--prompt-tokens", "2", "--gen-tokens", "3"]
    assert main([*argv, "--warmup", "0"]) == 0
    got = [json.loads(x) for x in capsys.readouterr().out.splitlines()][1:]
    assert got[0] == {"parallel": 2, "done": False, "ran": 1} == got[1]
    assert "a run of 2 streams is open" in got[2]["error"]
    last = got[3]
    assert last["done"] is True and last["generated_tokens"] == 6
    assert len(last["actions"]["kind"]) == 4  # every action of the run, the stepped ones too
    # a stepped run counts the engine's time only: TTFT and CPU are sums over actions
    assert last["cpu_s"] == sum(last["actions"]["cpu_s"])
    assert "turn" in got[4]["error"] and got[5]["parallel"] == 1 and "done" not in got[5]


def test_calibrate_knob(monkeypatch, capsys):
    assert "ENGINE_CALIBRATE_SLOWDOWN" in capabilities()["env_flags"]
    monkeypatch.delenv(calibrate.VAR, raising=False)
    assert calibrate.slowdown() == 0.0
    monkeypatch.setenv(calibrate.VAR, "0.25")
    assert calibrate.slowdown() == 0.25
    out = _bench(capsys, "--warmup", "0")
    assert out["flags"] == {calibrate.VAR: "0.25"}
    for bad in ("fast", "-1"):
        monkeypatch.setenv(calibrate.VAR, bad)
        with pytest.raises(InputError, match=calibrate.VAR):
            calibrate.slowdown()


def test_calibrate_keeps_tokens(monkeypatch, capsys):
    argv = ["generate", "--model", MODEL, "--prompt", "Return the", "--max-tokens", "6", "--json"]
    monkeypatch.delenv(calibrate.VAR, raising=False)
    assert main(argv) == 0
    plain = json.loads(capsys.readouterr().out)
    monkeypatch.setenv(calibrate.VAR, "0.5")
    assert main(argv) == 0
    slowed = json.loads(capsys.readouterr().out)
    assert slowed["ids"] == plain["ids"]


def test_runs_of_one_count_reuse_its_kv_memory_and_drafter(monkeypatch, capsys):
    """Every run of n streams after the first gets the KV memory and drafter (lane memory too)
    of the run before: a backend's captured graphs belong to them, so later repeats replay. A
    run of another count gets its own; the replies do not change."""
    from engine.cli import bench_run

    engines = []
    real = bench_run.Engine

    def spy(*a, **kw):  # type: ignore[no-untyped-def]
        e = real(*a, **kw)
        e.lanes_at_start = e.drafter.lanes  # the drafter is shared: its lanes may be replaced
        engines.append(e)
        return e

    monkeypatch.setattr(bench_run, "Engine", spy)
    _bench(capsys, "--parallel", "1,2", "--repeats", "2", "--drafter", "mtp")
    by_n = {}
    for e in engines:
        by_n.setdefault(e.cfg.parallel, []).append(e)
    assert sorted(by_n) == [1, 2] and all(len(es) == 3 for es in by_n.values())  # warm-up + 2
    for es in by_n.values():
        assert all(e.kv is es[0].kv and e.drafter is es[0].drafter for e in es)
        assert all(e.lanes_at_start is es[0].lanes_at_start for e in es)
        replies = [[s.generated for s in e.finished] for e in es[1:]]
        assert replies[0] == replies[1]
    assert by_n[1][0].kv is not by_n[2][0].kv
