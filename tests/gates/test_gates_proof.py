"""Proof that the gates can fail: planted bugs in a stub engine, on a temporary git repo."""

from __future__ import annotations

from conftest import gate, run_gates

HEADER = "model: fixtures/models/stub\nprompts: t\nmax_tokens: 8\ntimeout: 60\n"
BATCH = (
    HEADER
    + """
axes: {parallel: [1, 4], paging: [off, on]}
gates:
  - {name: concurrent == solo, within_commit: {vary: parallel, reference: serial}}
  - {name: paging == no paging, within_commit: {vary: paging, reference: off}}
"""
)
DRAFT = (
    HEADER
    + """
axes: {parallel: [4]}
gates:
  - {name: flags unset == main, across_commits: {}}
  - {name: drafted == plain, within_commit: {vary: drafter, values: [noisy], reference: none}}
"""
)
RESUME = (
    HEADER
    + """
axes: {paging: [on]}
gates:
  - {name: flags unset == main, across_commits: {}}
  - {name: resumed == fresh, resumed: {}}
"""
)


def matrix(repo, name: str, text: str) -> str:
    (repo.root / "matrices" / f"{name}.yaml").write_text(text)
    return f"matrices/{name}.yaml"


def test_head_that_changes_no_engine_file_passes_every_gate(stub_repo):
    (stub_repo.root / "README.md").write_text("docs only\n")
    stub_repo.commit("docs")
    code, man, md = run_gates(stub_repo, matrix="matrices/t.yaml")
    assert code == 0, md
    assert all(g["status"] == "pass" for g in man["gates"]), [g["status"] for g in man["gates"]]
    assert md.startswith("### Gates: ✅ all hold")
    # base and head share their engine tree, so each arm ran once for both sides
    assert man["matrix"]["ran"] < man["matrix"]["arms"]
    assert gate(man, "flags unset == main")["matched"] == gate(man, "flags unset == main")["total"]


def test_changed_output_fails_flags_unset_and_names_first_divergence(stub_repo):
    stub_repo.commit("change output", OUTPUT_SALT="x")
    code, man, md = run_gates(stub_repo)
    assert code == 1
    g = gate(man, "flags unset == main")
    assert g["status"] == "fail" and g["matched"] == 0
    d = g["entries"][0]["diffs"][0]
    assert d["index"] == 0 and d["a_ids"] != d["b_ids"]
    assert d["a_margin"] is not None
    assert "tokens differ from index 0" in md
    assert "margin at 0" in md
    # within one commit the changed engine is still consistent
    assert gate(man, "concurrent == solo")["status"] == "pass"


def test_batch_variance_fails_concurrent_eq_solo(stub_repo):
    stub_repo.commit("batch bug", BATCH_BUG=True)
    code, man, md = run_gates(stub_repo, matrix=matrix(stub_repo, "batch", BATCH))
    assert code == 1
    g = gate(man, "concurrent == solo")
    assert g["status"] == "fail"
    failing = [e for e in g["entries"] if e["status"] == "fail"]
    assert failing and all("p=4" in e["b"] for e in failing)
    assert all(e["status"] == "pass" for e in g["entries"] if "p=1" in e["b"])
    assert failing[0]["diffs"][0]["index"] == 3
    assert gate(man, "paging == no paging")["status"] == "pass"
    assert "**concurrent == solo**" in md


def test_page_leak_fails_resource_gate(stub_repo):
    stub_repo.commit("leak", LEAK_PAGES=1)
    code, man, md = run_gates(stub_repo)
    assert code == 1
    g = gate(man, "no pages at idle")
    assert g["status"] == "fail"
    assert any("pages in use at idle: 1" in e["reason"] for e in g["entries"])
    assert gate(man, "flags unset == main")["status"] == "pass"
    assert "pages in use at idle: 1" in md


def test_drafter_bug_fails_drafted_eq_plain(stub_repo):
    stub_repo.commit("draft bug", DRAFT_BUG=True)
    code, man, _ = run_gates(stub_repo, matrix=matrix(stub_repo, "draft", DRAFT))
    assert code == 1
    assert gate(man, "drafted == plain")["status"] == "fail"
    assert gate(man, "flags unset == main")["status"] == "pass"


def test_resume_bug_fails_resumed_eq_fresh(stub_repo):
    stub_repo.commit("resume bug", RESUME_BUG=True)
    code, man, _ = run_gates(stub_repo, matrix=matrix(stub_repo, "resume", RESUME))
    assert code == 1
    g = gate(man, "resumed == fresh")
    assert g["status"] == "fail"
    ids = {d["id"] for e in g["entries"] for d in e["diffs"]}
    assert ids <= {"chat1", "ids2turn"} and ids
    assert gate(man, "flags unset == main")["status"] == "pass"
