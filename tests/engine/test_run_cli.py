"""python -m engine run: the offline batch the gate runner drives (docs/contract.md).

A few cases run as subprocesses (the contract is the command line); the bad-input cases
call engine.__main__.main in process, which is the same code path and costs no start-up."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from engine.__main__ import main
from tests.engine.conftest import ROOT, TINY, ids

REPLY_FIELDS = {
    "id",
    "ids",
    "text",
    "token_sha",
    "finish_reason",
    "prompt_tokens",
    "margins",
    "min_margin",
    "logit_hashes",
    "drafted",
    "accepted",
}


def sha(token_ids: list[int]) -> str:
    return hashlib.sha256(",".join(map(str, token_ids)).encode()).hexdigest()[:12]


def engine(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "engine", *args], cwd=ROOT, capture_output=True, text=True
    )


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


REQUESTS = [
    {"id": "text", "prompt": "def add(a, b):", "max_tokens": 6},
    {"id": "chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5},
    {"id": "ids-65", "prompt_ids": ids(65, 1), "max_tokens": 7, "arrival": 0.01},
    {"id": "ids-16", "prompt_ids": ids(16, 2), "max_tokens": 4, "priority": "background"},
    {"id": "sampled", "prompt_ids": ids(20, 3), "max_tokens": 6, "temperature": 0.8, "seed": 5},
    {"id": "embed", "prompt_ids": ids(30, 4), "kind": "embed"},
    {"id": "cut", "prompt_ids": ids(12, 5), "max_tokens": 9, "cancel_after": 2},
    {"id": "past-context", "prompt_ids": ids(4100, 6), "max_tokens": 4},
    {"id": "past-max-pos", "prompt_ids": ids(2100, 7), "max_tokens": 4},
]
FLAGS = ["--context", "4096", "--step-rows", "32"]


@pytest.fixture(scope="module")
def batch(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One parallel run and one serial run of the same requests (two subprocesses)."""
    d = tmp_path_factory.mktemp("run")
    src = write_jsonl(d / "in.jsonl", REQUESTS)
    out = {}
    for name, extra in (("parallel", ["--parallel", "4"]), ("serial", ["--serial"])):
        res = engine(
            "run", "--model", str(TINY), "--requests", str(src), "--out", str(d / f"{name}.jsonl"),
            "--metrics", str(d / f"{name}.json"), *FLAGS, *extra,
        )  # fmt: skip
        assert res.returncode == 0, res.stderr
        out[name] = read_jsonl(d / f"{name}.jsonl")
        out[name + "_metrics"] = json.loads((d / f"{name}.json").read_text())
    return out


def test_replies_follow_the_contract(batch: dict[str, Any]) -> None:
    replies = batch["parallel"]
    assert [r["id"] for r in replies] == [q["id"] for q in REQUESTS]  # request order
    by_id = {r["id"]: r for r in replies}
    from engine.model.tokenizer import Tokenizer

    tok = Tokenizer(str(TINY))
    for q in REQUESTS:
        r = by_id[q["id"]]
        assert set(r) >= REPLY_FIELDS, r["id"]
        assert r["token_sha"] == sha(r["ids"])
        assert len(r["margins"]) == len(r["ids"])
        assert r["min_margin"] == (min(r["margins"]) if r["margins"] else None)
        assert len(r["logit_hashes"]) == len(r["ids"])
        assert all(len(h) == 16 and int(h, 16) >= 0 for h in r["logit_hashes"])
        assert r["drafted"] == 0 and r["accepted"] == 0
        if r["finish_reason"] != "error":
            assert "error" not in r
            assert r["text"] == tok.decode(r["ids"])
            assert len(r["ids"]) <= q.get("max_tokens", 16)
    assert by_id["text"]["prompt_tokens"] == len(tok.encode("def add(a, b):"))
    assert by_id["ids-65"]["prompt_tokens"] == 65
    assert by_id["ids-65"]["finish_reason"] in ("length", "stop")
    assert by_id["cut"]["finish_reason"] == "cancelled" and len(by_id["cut"]["ids"]) == 2
    emb = by_id["embed"]
    assert emb["ids"] == [] and emb["finish_reason"] == "stop"
    assert len(emb["embedding"]) == 128 and all(isinstance(x, float) for x in emb["embedding"])


def test_requests_that_cannot_be_served_are_refused_alone(batch: dict[str, Any]) -> None:
    by_id = {r["id"]: r for r in batch["parallel"]}
    ctx, pos = by_id["past-context"], by_id["past-max-pos"]
    assert ctx["finish_reason"] == "error" and "context" in ctx["error"] and ctx["ids"] == []
    assert pos["finish_reason"] == "error" and "max_position_embeddings" in pos["error"]
    served = [r for r in batch["parallel"] if r["finish_reason"] != "error"]
    assert len(served) == len(REQUESTS) - 2
    assert batch["parallel_metrics"]["errors"] == 2


def test_serial_equals_parallel(batch: dict[str, Any]) -> None:
    for par, ser in zip(batch["parallel"], batch["serial"], strict=True):
        assert par["id"] == ser["id"]
        assert (par["ids"], par["token_sha"], par["finish_reason"]) == (
            ser["ids"],
            ser["token_sha"],
            ser["finish_reason"],
        )
        assert par["margins"] == ser["margins"]
        assert par["logit_hashes"] == ser["logit_hashes"]
        assert par.get("embedding") == ser.get("embedding")


def test_metrics_at_idle(batch: dict[str, Any]) -> None:
    for name in ("parallel_metrics", "serial_metrics"):
        m = batch[name]
        assert m["pages_in_use"] == 0 and m["unplanned_allocations"] == 0
        for key in ("cached_pages", "wall_s", "prefill_tokens", "decode_tokens", "rounds",
                    "steps", "drafted", "accepted"):  # fmt: skip
            assert key in m, key
    assert batch["parallel_metrics"]["config"]["parallel"] == 4
    assert batch["serial_metrics"]["config"]["serial"] is True
    # the same prompt rows were computed either way (paging off: no prefix reuse)
    par, ser = batch["parallel_metrics"], batch["serial_metrics"]
    assert par["prefill_tokens"] == ser["prefill_tokens"]
    assert par["rounds"] < ser["rounds"]  # the parallel run did share rounds


# ---- bad input: one line on stderr, exit code 2 ----------------------------------------------


def one_line_error(capsys: pytest.CaptureFixture, code: int) -> str:
    out = capsys.readouterr()
    assert code == 2, out.err
    lines = out.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), out.err
    assert "Traceback" not in out.err
    return lines[0]


def test_a_malformed_line_names_its_line_number(tmp_path: Path, capsys) -> None:
    good = {"id": "a", "prompt_ids": [1, 2, 3]}
    cases = {
        "{not json": "not valid JSON",
        json.dumps({"id": "b"}): "exactly one of",
        json.dumps({"id": "b", "prompt_ids": [1], "max_tokens": 0}): "max_tokens",
        json.dumps({"id": "b", "prompt_ids": [1], "priority": "urgent"}): "priority",
        json.dumps({"id": "b", "prompt_ids": [1], "kind": "chat"}): "kind",
        json.dumps({"id": "b", "prompt_ids": [1, -2]}): "prompt_ids",
        json.dumps({"id": "b", "prompt_ids": [1], "arrival": "soon"}): "arrival",
        json.dumps({"id": "a", "prompt_ids": [1]}): "duplicate id",
        json.dumps({"id": "b", "prompt_ids": [1], "stop_ids": ["x"]}): "stop_ids",
        json.dumps({"id": "b", "prompt_ids": [1], "stop_ids": [1.5, True]}): "stop_ids",
        '{"id": "b", "prompt_ids": [1], "arrival": NaN}': "arrival",
        '{"id": "b", "prompt_ids": [1], "arrival": -1}': "arrival",
        '{"id": "b", "prompt_ids": [1], "temperature": NaN}': "temperature",
        '{"id": "b", "prompt_ids": [1], "temperature": Infinity}': "temperature",
        json.dumps({"id": "b", "prompt_ids": [1], "cancel_after": -1}): "cancel_after",
        json.dumps({"id": "b", "prompt_ids": [1], "cancel_after_rows": 0}): "cancel_after_rows",
        json.dumps({"id": "b", "prompt_ids": [1], "cancel_after_rows": "x"}): "cancel_after_rows",
        json.dumps([1, 2]): "JSON object",
        json.dumps({"id": "b", "prompt_ids": [1], "temprature": 0.5}): "unknown field 'temprature'",
        json.dumps({"id": "b", "prompt_ids": [1], "arrival": 1e6}): "arrival",
    }
    for bad, reason in cases.items():
        src = write_jsonl(tmp_path / "in.jsonl", [good, "", bad])
        code = main(["run", "--model", str(TINY), "--requests", str(src),
                     "--out", str(tmp_path / "out.jsonl")])  # fmt: skip
        line = one_line_error(capsys, code)
        assert f"{src}:3:" in line and reason in line, line
        assert not (tmp_path / "out.jsonl").exists()


def test_a_missing_model_or_requests_file(tmp_path: Path, capsys) -> None:
    src = write_jsonl(tmp_path / "in.jsonl", [{"id": "a", "prompt_ids": [1, 2]}])
    code = main(["run", "--model", str(tmp_path / "no-model"), "--requests", str(src),
                 "--out", str(tmp_path / "o.jsonl")])  # fmt: skip
    assert "no-model" in one_line_error(capsys, code)
    code = main(["run", "--model", str(TINY), "--requests", str(tmp_path / "none.jsonl"),
                 "--out", str(tmp_path / "o.jsonl")])  # fmt: skip
    assert "none.jsonl" in one_line_error(capsys, code)


def corrupt_copy(tmp_path: Path, keep: int) -> Path:
    model = tmp_path / f"tiny-{keep}"
    shutil.copytree(TINY, model)
    st = model / "model.safetensors"
    st.write_bytes(st.read_bytes()[:keep])
    return model


def test_a_corrupt_checkpoint_is_one_line_and_exit_2(tmp_path: Path, capsys) -> None:
    src = write_jsonl(tmp_path / "in.jsonl", [{"id": "a", "prompt_ids": [1, 2]}])
    size = (TINY / "model.safetensors").stat().st_size
    for keep in (0, 5, 100, size // 2, size - 1):
        model = corrupt_copy(tmp_path, keep)
        code = main(["run", "--model", str(model), "--requests", str(src),
                     "--out", str(tmp_path / "o.jsonl")])  # fmt: skip
        assert "model.safetensors" in one_line_error(capsys, code), keep
    # and once as the gate runner sees it: a subprocess, no traceback
    res = engine("run", "--model", str(corrupt_copy(tmp_path, size // 3)), "--requests",
                 str(src), "--out", str(tmp_path / "o.jsonl"))  # fmt: skip
    assert res.returncode == 2
    assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr
    assert "model.safetensors" in res.stderr and "truncated" in res.stderr


def test_generate_refuses_a_prompt_past_max_position_embeddings(tmp_path: Path, capsys) -> None:
    prompt = ",".join(map(str, ids(2100, 9)))
    code = main(["generate", "--model", str(TINY), "--prompt-ids", prompt,
                 "--max-tokens", "4", "--context", "4096"])  # fmt: skip
    assert "max_position_embeddings" in one_line_error(capsys, code)


def test_bad_engine_flags(tmp_path: Path, capsys) -> None:
    src = write_jsonl(tmp_path / "in.jsonl", [{"id": "a", "prompt_ids": [1, 2]}])
    for flags, reason in (
        (["--parallel", "0"], "--parallel"),
        (["--kv-pages", "-1"], "--kv-pages"),
        (["--share", "0"], "--share"),
        (["--step-rows", "0"], "--step-rows"),
    ):
        code = main(["run", "--model", str(TINY), "--requests", str(src),
                     "--out", str(tmp_path / "o.jsonl"), *flags])  # fmt: skip
        assert reason in one_line_error(capsys, code)


def test_bad_bytes_and_outputs_are_one_line_errors(tmp_path: Path, capsys) -> None:
    src = tmp_path / "in.jsonl"
    src.write_bytes(b'{"id": "a", "prompt_ids": [1]}\n{"id": "b", "prompt": "caf\xe9"}\n')
    code = main(["run", "--model", str(TINY), "--requests", str(src),
                 "--out", str(tmp_path / "o.jsonl")])  # fmt: skip
    assert f"{src}:2: not UTF-8" in one_line_error(capsys, code)
    good = write_jsonl(tmp_path / "ok.jsonl", [{"id": "a", "prompt_ids": [1]}])
    for flag in ("--out", "--metrics", "--trace"):
        argv = ["run", "--model", str(TINY), "--requests", str(good),
                "--out", str(tmp_path / "o.jsonl")]  # fmt: skip
        if flag == "--out":
            argv[-1] = str(tmp_path / "missing" / "o.jsonl")
        else:
            argv += [flag, str(tmp_path / "missing" / "x")]
        line = one_line_error(capsys, main(argv))
        assert flag in line and "does not exist" in line, line
    code = main(["run", "--model", str(TINY), "--requests", str(good),
                 "--out", str(tmp_path / "o.jsonl"), "--share", "nan"])  # fmt: skip
    assert "--share" in one_line_error(capsys, code)


def test_generate_refuses_a_temperature_that_is_not_a_finite_number_from_0(capsys) -> None:
    """Issue 10: `generate --temperature -1` sampled silently (exit 0)."""
    for value in ("-1", "nan", "inf"):
        code = main(["generate", "--model", str(TINY), "--prompt", "hi",
                     "--max-tokens", "2", "--temperature", value])  # fmt: skip
        assert "--temperature" in one_line_error(capsys, code), value
