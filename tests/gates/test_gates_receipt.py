"""Receipts that paste: tracebacks fenced, and under GitHub's size limit for the full matrix."""

from __future__ import annotations

from markdown_it import MarkdownIt

from conftest import run_gates

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
