"""Hostile input to the command lines and model files: each case is exit 2 with one clear
line naming the flag, file or field, and never a traceback."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest

from engine.__main__ import main as engine_main
from gates.__main__ import main as gates_main

TINY = Path(__file__).parents[2] / "fixtures" / "models" / "tiny-qwen3"
ONE = {"id": "a", "prompt_ids": [1, 2], "max_tokens": 2}


def engine(argv: list[str], capsys) -> tuple[int, str]:
    try:
        code = engine_main(argv)
    except SystemExit as exc:  # argparse
        code = int(exc.code or 0)
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert not any("Traceback" in ln for ln in err), err
    return code, err[-1] if err else ""


def run_argv(tmp_path: Path, *flags: str, lines: list | None = None, model: Path = TINY) -> list:
    req = tmp_path / "in.jsonl"
    body = "".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines or [ONE])
    req.write_text(body)
    return ["run", "--model", str(model), "--requests", str(req), "--out", str(tmp_path / "o")]


FLAGS = [
    (["--parallel", "0"], "--parallel"),
    (["--parallel", "65"], "--parallel"),
    (["--parallel", "abc"], "--parallel"),
    (["--context", "0"], "--context"),
    (["--context", "-5"], "--context"),
    (["--context", "100000000"], "needs"),
    (["--context", "100000000", "--kv", "fp8"], "available"),
    (["--parallel", "64", "--context", "10000000"], "bytes"),
    (["--kv-pages", "100000000"], "--kv-pages"),
    (["--kv-pages", "-1"], "--kv-pages"),
    (["--kv", "fp4"], "--kv"),
    (["--page-rows", "0"], "--page-rows"),
    (["--step-rows", "0"], "--step-rows"),
    (["--share", "0"], "--share"),
    (["--share", "nan"], "--share"),
    (["--draft-tokens", "17"], "--draft-tokens"),
    (["--drafter", "warp"], "--drafter"),
    (["--backend", "nope"], "--backend"),
]


@pytest.mark.parametrize(("flags", "named"), FLAGS, ids=[" ".join(f) for f, _ in FLAGS])
def test_engine_run_refuses_bad_flags(tmp_path, capsys, flags, named):
    code, line = engine([*run_argv(tmp_path), *flags], capsys)
    assert code == 2 and named in line, line


def test_the_memory_refusal_gives_bytes_needed_and_available(tmp_path, capsys):
    code, line = engine([*run_argv(tmp_path), "--context", "100000000"], capsys)
    assert code == 2 and "--context 100000000" in line
    needed, available = (int(x) for x in __import__("re").findall(r"(\d+) bytes", line))
    assert needed > available > 0


LINES = [
    ("{not json", "in.jsonl:1"),
    ({**ONE, "temprature": 1}, "temprature"),
    ({**ONE, "max_tokens": 0}, "max_tokens"),
    ({"id": "a", "prompt_ids": [-1]}, "prompt_ids"),
    ({**ONE, "temperature": -1}, "temperature"),
    ({"prompt_ids": [1]}, "'id'"),
    ({**ONE, "prompt": "x"}, "exactly one"),
    ({"id": "a", "prompt_ids": []}, "empty"),
    ({**ONE, "kind": "sing"}, "kind"),
    ({**ONE, "stop_ids": "x"}, "stop_ids"),
    ({**ONE, "max_tokens": True}, "max_tokens"),
    ([1, 2], "object"),
]


@pytest.mark.parametrize(("line", "named"), LINES, ids=[n for _, n in LINES])
def test_engine_run_refuses_bad_request_lines(tmp_path, capsys, line, named):
    code, msg = engine(run_argv(tmp_path, lines=[line]), capsys)
    assert code == 2 and named in msg, msg


SERVE = [
    (["--port", "99999"], "--port"),
    (["--port", "-1"], "--port"),
    (["--header-timeout", "0"], "--header-timeout"),
    (["--body-timeout", "-1"], "--body-timeout"),
    (["--body-timeout", "soon"], "--body-timeout"),
    (["--parallel", "100"], "--parallel"),
]


@pytest.mark.parametrize(("flags", "named"), SERVE, ids=[" ".join(f) for f, _ in SERVE])
def test_engine_serve_refuses_bad_flags(capsys, flags, named):
    code, line = engine(["serve", "--model", str(TINY), *flags], capsys)
    assert code == 2 and named in line, line


@pytest.mark.parametrize("jobs", ["0", "-2", "x", "1.5"])
def test_gates_run_refuses_jobs_below_one(capsys, jobs):
    code = gates_main(["run", f"--jobs={jobs}", "--base", "main", "--head", "HEAD"])
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert code == 2 and "--jobs" in err[-1] and ">= 1" in err[-1], err


def _model_copy(tmp_path: Path) -> Path:
    dst = tmp_path / "model"
    shutil.copytree(TINY, dst)
    return dst


def _header(raw: bytes) -> tuple[dict, int]:
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8 : 8 + n]), n


def _rewrite(raw: bytes, change) -> bytes:
    header, n = _header(raw)
    change(header)
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + raw[8 + n :]


def _first(header: dict) -> dict:
    return header[next(k for k in header if k != "__metadata__")]


FILES = [
    ("cut-4", lambda raw: raw[:4], "truncated"),
    ("cut-100", lambda raw: raw[:100], "truncated"),
    ("cut-half", lambda raw: raw[: len(raw) // 2], "truncated"),
    ("cut-1", lambda raw: raw[:-1], "truncated"),
    ("header-not-json", lambda raw: raw[:8] + b"!" * (len(raw) - 8), "header"),
    ("header-a-list", lambda raw: struct.pack("<Q", 2) + b"[]" + raw[10:], "header"),
    ("bad-dtype", lambda raw: _rewrite(raw, lambda h: _first(h).update(dtype="Q7")), "corrupt"),
    (
        "bad-offsets",
        lambda raw: _rewrite(raw, lambda h: _first(h).update(data_offsets=[0, 3])),
        "corrupt header",
    ),
]


@pytest.mark.parametrize(("name", "damage", "word"), FILES, ids=[f[0] for f in FILES])
def test_a_damaged_safetensors_file_is_one_consistent_line(tmp_path, capsys, name, damage, word):
    model = _model_copy(tmp_path)
    path = model / "model.safetensors"
    path.write_bytes(damage(path.read_bytes()))
    code, line = engine(run_argv(tmp_path, model=model), capsys)
    assert code == 2 and word in line and "model.safetensors" in line, line
    sizes = __import__("re").findall(r"has (\d+) bytes, expected (\d+)", line)
    assert not [a for a, b in sizes if a == b], line  # never "has N bytes, expected N"


@pytest.mark.parametrize(
    ("name", "change", "word"),
    [
        ("no-config", lambda m: (m / "config.json").unlink(), "config.json"),
        ("config-not-json", lambda m: (m / "config.json").write_text("{"), "config.json"),
        ("no-weights", lambda m: (m / "model.safetensors").unlink(), "safetensors"),
    ],
)
def test_a_broken_model_folder_is_one_line(tmp_path, capsys, name, change, word):
    model = _model_copy(tmp_path)
    change(model)
    code, line = engine(run_argv(tmp_path, model=model), capsys)
    assert code == 2 and word in line, line
