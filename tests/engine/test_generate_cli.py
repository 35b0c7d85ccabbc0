"""python -m engine generate: the form the gate runner and outside checks depend on."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]
TINY = str(ROOT / "fixtures" / "models" / "tiny-qwen3")


def engine(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "engine", *args], cwd=ROOT, capture_output=True, text=True
    )


def test_generate_json_and_text_agree_with_prompt_ids():
    text = engine(
        "generate", "--model", TINY, "--prompt", "Return the", "--max-tokens", "8", "--json"
    )
    assert text.returncode == 0, text.stderr
    out = json.loads(text.stdout)
    assert len(out["ids"]) <= 8 and out["finish_reason"] in ("length", "stop")
    sha = hashlib.sha256(",".join(map(str, out["ids"])).encode()).hexdigest()[:12]
    assert out["token_sha"] == sha
    from engine.model.tokenizer import Tokenizer

    ids = ",".join(map(str, Tokenizer(TINY).encode("Return the")))
    again = engine(
        "generate",
        "--model",
        TINY,
        "--prompt-ids",
        ids,
        "--max-tokens",
        "8",
        "--json",
        "--kv",
        "fp8",
    )
    assert again.returncode == 0, again.stderr
    assert 1 <= len(json.loads(again.stdout)["ids"]) <= 8
    plain = engine("generate", "--model", TINY, "--prompt-ids", ids, "--max-tokens", "8")
    assert plain.returncode == 0 and plain.stdout.rstrip("\n") == out["text"]


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    cases = [
        ("generate", "--model", str(tmp_path / "nope"), "--prompt", "x", "--max-tokens", "2"),
        ("generate", "--model", TINY, "--prompt-ids", "1,2", "--max-tokens", "5000"),
        ("generate", "--model", TINY, "--prompt-ids", "1,x", "--max-tokens", "2"),
        ("generate", "--model", TINY, "--prompt-ids", "1", "--backend", "tpu"),
    ]
    for args in cases:
        res = engine(*args)
        assert res.returncode == 2, (args, res.stderr)
        assert len(res.stderr.strip().splitlines()) == 1, res.stderr
        assert "Traceback" not in res.stderr


def test_capabilities_lists_what_the_gate_runner_needs():
    res = engine("capabilities", "--json")
    caps = json.loads(res.stdout)
    assert caps["contract"] >= 1
    assert {"numpy", "fake"} <= set(caps["backends"])
    assert {"bf16", "fp8"} <= set(caps["kv"])
    assert {"none", "mtp", "block", "oracle", "noisy"} <= set(caps["drafters"])


def test_a_drafted_generate_says_how_many_drafts_were_kept():
    got = engine("generate", "--model", TINY, "--prompt", "Return the", "--max-tokens", "32",
                 "--drafter", "mtp", "--json")  # fmt: skip
    assert got.returncode == 0, got.stderr
    out = json.loads(got.stdout)  # stdout stays one JSON object
    line = (
        f"drafter mtp: {out['accepted']} of {out['drafted']} drafted tokens accepted "
        f"({100 * out['accepted'] / out['drafted']:.0f} %), {len(out['ids'])} tokens in "
    )
    assert line in got.stderr and out["drafted"] > 0


def test_a_plain_generate_says_nothing_of_drafts():
    got = engine("generate", "--model", TINY, "--prompt", "Return the", "--max-tokens", "4")
    assert got.returncode == 0 and "drafter" not in got.stderr, got.stderr
