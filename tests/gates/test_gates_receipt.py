"""Receipts that paste: tracebacks fenced, and under GitHub's size limit for the full matrix."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from markdown_it import MarkdownIt

from conftest import run_gates
from gates import pipeline as run_mod
from gates.plan.arm_config import ArmConfig
from gates.report.receipt import render
from gates.report.receipt.table import fence
from gates.report.view import Manifest
from gates.run import execute
from gates.run.capabilities import Capabilities
from gates.run.execute import ArmJob
from gates.run.reply import Reply
from gates.run.results import ArmRun, Status

REPO = Path(__file__).resolve().parents[2]

PARSER = MarkdownIt("commonmark")


def code_and_prose(md: str) -> tuple[str, str]:
    """(text of every code block, text of everything else) as a CommonMark parser reads it."""
    code, prose = [], []
    for tok in PARSER.parse(md):
        if tok.type in ("fence", "code_block"):
            code.append(tok.content)
        elif tok.type == "inline":
            prose.append(tok.content)
    return "\n".join(code), "\n".join(prose)


def test_a_crashed_arms_traceback_is_in_a_code_block(stub_repo):
    stub_repo.commit("fp8 raises, with a fence in its message", RAISE_KV="fp8")
    code, man, md = run_gates(stub_repo)
    assert code == 3
    tail = next(a["stderr_tail"] for a in man["arms"] if a.get("status") == "crashed")
    assert "Traceback (most recent call last):" in tail and "\n```\n" in tail
    code_text, prose = code_and_prose(md)
    for line in tail.splitlines():  # every line, the ``` in the message and what follows too
        assert line.strip() in code_text, line
    assert "Traceback (most recent call last)" not in prose
    assert "still stderr" not in prose
    assert "#### Could not run" in md and "Reproduce:" in prose  # nothing after it swallowed


def test_a_multi_line_reason_in_a_bullet_is_fenced(stub_repo):
    stub_repo.commit("caps fail with a traceback", FAIL_CAPABILITIES=True)
    code, man, md = run_gates(stub_repo)
    assert code == 3  # head has no capabilities: its arms could not run
    code_text, prose = code_and_prose(md)
    assert "capabilities --json` exited 3" in prose
    assert "Traceback (most recent call last)" in code_text
    assert "Traceback (most recent call last)" not in prose
    assert "RuntimeError: capabilities: broken" in code_text


def crash(job: ArmJob) -> ArmRun:
    frames = "".join(
        f'  File "engine/lanes/loop.py", line {100 + i}, in step_{i}\n    rows = plan(lanes)\n'
        for i in range(30)
    )
    tb = f"Traceback (most recent call last):\n{frames}ValueError: {job.label}: {job.config}"
    return ArmRun.from_json(
        {
            **{"status": "crashed", "exit_code": 1, "wall_s": 1.0, "argv": "python -m engine run"},
            **{"stderr_tail": tb[-2000:], "reason": "engine exited 1", "device": None},
        }
    )


def reply(req: dict[str, Any], cfg: ArmConfig, head: bool) -> dict[str, Any]:
    n = int(req.get("max_tokens", cfg.max_tokens))
    ids = [zlib.crc32(f"{req['id']}:{i}".encode()) % 1000 for i in range(n)]
    if head:
        cut = 3 if cfg.parallel > 1 and not cfg.serial else 5
        cut -= cfg.drafter != "none" or bool(cfg.resumed)
        ids[cut:] = [(t + 1) % 1000 for t in ids[cut:]]
    return {
        **{"id": req["id"], "ids": ids, "token_sha": str(zlib.crc32(repr(ids).encode()))},
        **{"finish_reason": "length", "prompt_tokens": 10, "margins": [0.5] * n},
        **{"drafted": 4 * n, "accepted": n if head else 3 * n},
    }


def fake_arm(head_sha: str) -> Callable[..., ArmRun]:
    """An arm result as run_arm returns it, made in-process from the job (no engine): the
    head changes a token of every reply (sooner where a request runs beside others, drafted
    or resumed), accepts fewer drafts, leaks pages, and crashes at 8 streams with paging,
    each arm with its own traceback."""

    def run(job: ArmJob, live: Any = None, device: str | None = None) -> ArmRun:
        cfg, head = job.config, job.worktree.name == head_sha
        if head and cfg.parallel == 8 and cfg.paging != "off" and not cfg.serial:
            return crash(job)
        reqs = [json.loads(line) for line in job.requests.decode().splitlines()]
        metrics = {"pages_in_use": 2 * head, "unplanned_allocations": 0, "drafter_states": 0}
        return ArmRun(
            status=Status.OK,
            exit_code=0,
            wall_s=1.0,
            argv="python -m engine run",
            replies=[Reply.from_json(reply(r, cfg, head)) for r in reqs],
            metrics=metrics,
        )

    return run


def test_the_default_matrix_with_a_failing_head_stays_under_the_limit(stub_repo, monkeypatch):
    """matrices/default.yaml as it is (its arms, prompt sets and models), against a head that
    fails every gate it can and crashes 16 arms or more, each with its own traceback: the receipt
    stays under GitHub's limit, and the full report beside it has every comparison."""
    root = stub_repo.root
    for name in ("tiny-qwen3", "tiny-qwen3-block", "tiny-qwen3-moe"):
        shutil.copytree(REPO / "fixtures" / "models" / name, root / "fixtures" / "models" / name)
    for p in (REPO / "fixtures" / "prompts").glob("*.jsonl"):
        shutil.copy(p, root / "fixtures" / "prompts" / p.name)
    shutil.copy(REPO / "matrices" / "default.yaml", root / "matrices" / "default.yaml")
    head = stub_repo.commit("the default matrix; an engine tree of its own", OUTPUT_SALT="h")
    caps = json.loads(
        subprocess.run(
            [sys.executable, "-m", "engine", "capabilities", "--json"],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    caps.setdefault("architectures", ["Qwen3ForCausalLM", "Qwen3MoeForCausalLM"])  # fake arms
    typed = Capabilities.from_json(caps)
    monkeypatch.setattr(run_mod, "capabilities", lambda worktree, cache, **kw: (typed, ""))
    monkeypatch.setattr(execute, "run_arm", fake_arm(head))
    code, man, md = run_gates(stub_repo, "--no-speed", matrix="matrices/default.yaml")
    assert code == 1, man.get("verdict")
    assert man["matrix"]["arms"] >= 290  # the whole matrix (300 on main when this was written)
    crashed = [a for a in man["arms"] if a.get("status") == "crashed"]
    assert len({a["stderr_tail"] for a in crashed}) >= 16
    failed = {g["name"] for g in man["gates"] if g["status"] == "fail"}
    assert len(failed) >= 6, failed
    assert len(md) <= render.MAX_MARKDOWN
    assert man["verdict"] in md and "#### Failures" in md and "#### Could not run" in md
    assert "cut at" not in md and "Reproduce:" in md  # whole: lists shortened, not cut off
    assert f"more in `{render.file_stem(Manifest.parse(man))}.full.md`" in md
    full = (root / "receipts" / f"{render.file_stem(Manifest.parse(man))}.full.md").read_text()
    assert len(full) > render.MAX_MARKDOWN and "Every comparison" in full
    code_text, prose = code_and_prose(md)  # the receipt still parses as it should
    assert "rows = plan(lanes)" in code_text and "rows = plan(lanes)" not in prose


def test_the_last_resort_cut_closes_what_it_leaves_open():
    stderr = "\n".join(f"  File x.py, line {i}" for i in range(20_000))
    text = f"### Gates\n\n<details><summary>s</summary>\n\n- crash\n\n{fence(stderr, 2)}\n"
    cut = render._cut(text + "</details>\n", "r.full.md")
    assert len(cut) <= render.MAX_MARKDOWN
    code_text, prose = code_and_prose(cut)
    assert "cut at" in prose and "cut at" not in code_text
    assert cut.count("<details>") == cut.count("</details>")
