"""run --virtual-clock, --trace and cancel_after_rows (docs/contract.md, version 2).

In process through engine.__main__.main: the same code path as the command line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from engine.__main__ import main
from tests.engine.conftest import TINY, ids

TRACE_KEYS = {
    "event", "t_ms", "ms", "kind", "decoding", "decoded", "stepped", "waiting", "arrived",
    "debt_ms", "first_token", "finished",
}  # fmt: skip

MIXED = [
    {"id": "text", "prompt": "def add(a, b):", "max_tokens": 6},
    {"id": "long", "prompt_ids": ids(90, 1), "max_tokens": 7, "arrival": 0.002},
    {"id": "short", "prompt_ids": ids(12, 2), "max_tokens": 5, "arrival": 0.004},
    {"id": "sampled", "prompt_ids": ids(20, 3), "max_tokens": 6, "temperature": 0.8, "seed": 5},
    {"id": "cut", "prompt_ids": ids(70, 4), "max_tokens": 9, "cancel_after_rows": 20},
    {"id": "late", "prompt_ids": ids(40, 5), "max_tokens": 4, "arrival": 0.02, "ignore_eos": True},
    {"id": "embed", "prompt_ids": ids(30, 6), "kind": "embed", "arrival": 0.003},
]


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def run(tmp: Path, name: str, requests: list[dict], *flags: str) -> dict[str, Any]:
    src = tmp / f"{name}-in.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in requests))
    out, metrics, trace = (tmp / f"{name}.{ext}" for ext in ("jsonl", "json", "trace.jsonl"))
    code = main(["run", "--model", str(TINY), "--requests", str(src), "--out", str(out),
                 "--metrics", str(metrics), "--trace", str(trace), *flags])  # fmt: skip
    assert code == 0
    return {
        "replies": {r["id"]: r for r in read_jsonl(out)},
        "metrics": json.loads(metrics.read_text()),
        "trace": read_jsonl(trace),
        "trace_text": trace.read_text(),
    }


FLAGS = ("--parallel", "2", "--step-rows", "16", "--kv-pages", "40", "--context", "256")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("trace")
    return {
        "virtual": run(tmp, "virtual", MIXED, *FLAGS, "--virtual-clock"),
        "again": run(tmp, "again", MIXED, *FLAGS, "--virtual-clock"),
        "real": run(tmp, "real", MIXED, *FLAGS),
    }


def test_the_virtual_clock_makes_the_trace_deterministic(runs: dict) -> None:
    assert runs["virtual"]["trace_text"] == runs["again"]["trace_text"]
    assert runs["virtual"]["trace"] and runs["virtual"]["replies"] == runs["again"]["replies"]


def test_the_virtual_clock_keeps_every_token(runs: dict) -> None:
    virtual, real = runs["virtual"]["replies"], runs["real"]["replies"]
    assert set(virtual) == set(real) == {r["id"] for r in MIXED}
    for rid, r in real.items():
        v = virtual[rid]
        keys = ("ids", "finish_reason", "margins", "logit_hashes", "embedding")
        assert [v.get(k) for k in keys] == [r.get(k) for k in keys], rid


def test_trace_rows(runs: dict) -> None:
    rows = runs["virtual"]["trace"]
    assert [r["event"] for r in rows] == list(range(len(rows)))
    for r in rows:
        assert set(r) == TRACE_KEYS
        assert r["kind"] in ("short", "long", "round")
        assert (r["kind"] == "round") == bool(r["decoded"]) == (not r["stepped"])
        assert set(r["decoded"]) <= set(r["decoding"])
        assert not set(r["stepped"]) & set(r["waiting"])
    for a, b in zip(rows, rows[1:], strict=False):  # virtual time: back to back, or a sleep
        assert b["t_ms"] >= round(a["t_ms"] + a["ms"], 6) - 1e-6
    # the cost model: 1 ms + 0.02 ms a row
    for r in rows:
        rows_in = sum(r["stepped"].values()) if r["stepped"] else None
        if rows_in is not None:
            assert r["ms"] == pytest.approx(1.0 + 0.02 * rows_in, abs=1e-6)
    arrived = {k: v for r in rows for k, v in r["arrived"].items()}
    short = {"text", "short"}  # fit one step of 16 rows
    assert arrived == {r["id"]: "short" if r["id"] in short else "long" for r in MIXED}
    late = next(r for r in rows if "late" in r["arrived"])
    assert late["t_ms"] >= 20.0
    finished = {k: v for r in rows for k, v in r["finished"].items()}
    replies = runs["virtual"]["replies"]
    assert finished == {rid: rep["finish_reason"] for rid, rep in replies.items()}
    firsts = [i for r in rows for i in r["first_token"]]
    assert sorted(firsts) == sorted(rid for rid, rep in replies.items() if rep["ids"])
    assert runs["virtual"]["metrics"]["drafter_states"] == 0


def test_cancel_after_rows_cancels_inside_the_prompt(runs: dict) -> None:
    for name in ("virtual", "real"):
        cut = runs[name]["replies"]["cut"]
        assert cut["finish_reason"] == "cancelled" and cut["ids"] == []
        assert cut["logit_hashes"] == [] and cut["margins"] == []
        assert runs[name]["metrics"]["pages_in_use"] == 0
        assert runs[name]["metrics"]["unplanned_allocations"] == 0
        steps = [r["stepped"]["cut"] for r in runs[name]["trace"] if "cut" in r["stepped"]]
        assert steps == [16, 16]  # it held a lane and pages, fed 32 >= 20 rows, then stopped


def burst() -> list[dict]:
    """Two decoders at 0 (the first ends mid-burst and frees its lane), then 40 one-token
    requests at 5 ms."""
    decoders = [
        {"id": "d0", "prompt_ids": ids(8, 40), "max_tokens": 10, "ignore_eos": True},
        {"id": "d1", "prompt_ids": ids(8, 41), "max_tokens": 120, "ignore_eos": True},
    ]
    shorts = [
        {"id": f"s{i}", "prompt_ids": ids(6, 100 + i), "max_tokens": 1, "arrival": 0.005}
        for i in range(40)
    ]
    return decoders + shorts


def longest_wait(rows: list[dict], rid: str) -> int:
    """The longest run of consecutive events with `rid` decoding but not in the round."""
    run = best = 0
    for r in rows:
        run = run + 1 if rid in r["decoding"] and rid not in r["decoded"] else 0
        best = max(best, run)
    return best


def test_a_burst_of_short_prompts_lets_a_round_go_every_lane_count(tmp_path: Path) -> None:
    got = run(tmp_path, "burst", burst(), "--parallel", "2", "--virtual-clock")
    rows = got["trace"]
    beside = [r for r in rows if r["kind"] == "short" and "d1" in r["decoding"]]
    assert len(beside) >= 30  # the burst really ran beside a decoder
    assert all(got["replies"][f"s{i}"]["ids"] for i in range(40))
    for rid in ("d0", "d1"):
        assert longest_wait(rows, rid) <= 2, rid


def test_capabilities_list_the_keys_a_run_uses(runs: dict) -> None:
    from dataclasses import fields

    from engine.cli.capabilities import capabilities
    from engine.lanes.request import Request

    caps = capabilities()
    assert caps["contract"] == 7
    assert caps["architectures"] == ["Qwen3ForCausalLM", "Qwen3MoeForCausalLM"]
    assert {"--virtual-clock", "--trace"} <= set(caps["flags"])
    got = runs["virtual"]
    assert set(caps["metrics_keys"]) == set(got["metrics"])
    seen = {k for r in got["replies"].values() for k in r}
    assert seen == set(caps["reply_keys"]) - {"error"}  # no request failed here
    parsed = {f.name for f in fields(Request)} | {"prompt", "messages"}
    assert set(caps["request_keys"]) == parsed
