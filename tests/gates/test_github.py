"""gates.report.github offline: the comment body and every API request against a fake transport that
records them and answers as GitHub's REST API does; no test calls GitHub."""

from __future__ import annotations

import json
from typing import Any

from gates.report import github
from tests.gates.conftest import run_gates

API = "https://api.github.com/repos/o/r"
RUN = "https://github.com/o/r/actions/runs/42"
SHA = "c0ffee" * 6 + "beef"


class Fake:
    """Answers from ``routes`` ((method, url prefix) -> list of (code, json), used in turn)
    and records every request as (method, url, body)."""

    def __init__(self, routes: dict[tuple[str, str], list[tuple[int, Any]]]) -> None:
        self.routes, self.sent = routes, []

    def __call__(self, method: str, url: str, body: dict[str, Any] | None) -> tuple[int, Any]:
        self.sent.append((method, url, body))
        for (m, prefix), answers in self.routes.items():
            if m == method and url.startswith(prefix) and answers:
                return answers.pop(0)
        raise AssertionError(f"unexpected request {method} {url}")


def _env(tmp_path, labels=(), pr=7) -> dict[str, str]:
    event = {
        "pull_request": {
            "number": pr,
            "head": {"sha": SHA},
            "labels": [{"name": n} for n in labels],
        }
    }
    path = tmp_path / "event.json"
    path.write_text(json.dumps(event))
    return {
        "GITHUB_EVENT_PATH": str(path),
        "GITHUB_REPOSITORY": "o/r",
        "GITHUB_RUN_ID": "42",
        "GITHUB_TOKEN": "t",
    }


def _comment(cid: int, body: str, login: str = "github-actions[bot]") -> dict[str, Any]:
    return {"id": cid, "body": body, "user": {"login": login}, "html_url": f"https://x/{cid}"}


RECEIPT = "### Gates: ❌ 1 gate failed: speed — `92264a8ac3` against `d15717d1ab`\n\nbody\n"


def test_first_push_makes_the_comment_then_edits_it_in_place(tmp_path):
    receipt = tmp_path / "r.md"
    receipt.write_text(RECEIPT)
    others = [_comment(1, "LGTM", "alice"), _comment(2, "<!-- exact-gates:gpu -->\nold gpu")]
    fake = Fake(
        {
            ("POST", f"{API}/statuses/"): [(201, {}), (201, {})],
            ("GET", f"{API}/issues/7/comments"): [
                (200, others),
                (200, [*others, _comment(9, "<!-- exact-gates:quick -->\nold")]),
            ],
            ("POST", f"{API}/issues/7/comments"): [(201, _comment(9, "x"))],
            ("PATCH", f"{API}/issues/comments/9"): [(200, _comment(9, "x"))],
        }
    )
    args = ["post", "--matrix", "quick", "--receipt", str(receipt), "--exit-code", "1"]
    assert github.main(args, send=fake, env=_env(tmp_path)) == 0
    assert github.main(args, send=fake, env=_env(tmp_path)) == 0
    status = {
        "state": "failure",
        "context": "exact-gates/quick",
        "description": "❌ 1 gate failed: speed",
        "target_url": RUN,
    }
    body = "<!-- exact-gates:quick -->\n" + RECEIPT
    assert fake.sent == [
        ("POST", f"{API}/statuses/{SHA}", status),
        ("GET", f"{API}/issues/7/comments?per_page=100&page=1", None),
        ("POST", f"{API}/issues/7/comments", {"body": body}),
        ("POST", f"{API}/statuses/{SHA}", status),
        ("GET", f"{API}/issues/7/comments?per_page=100&page=1", None),
        ("PATCH", f"{API}/issues/comments/9", {"body": body}),
    ]


def test_the_marker_is_found_on_a_later_page(tmp_path):
    page1 = [_comment(i, f"chatter {i}") for i in range(100)]
    fake = Fake(
        {
            ("POST", f"{API}/statuses/"): [(201, {})],
            ("GET", f"{API}/issues/7/comments?per_page=100&page=1"): [(200, page1)],
            ("GET", f"{API}/issues/7/comments?per_page=100&page=2"): [
                (200, [_comment(555, "<!-- exact-gates:quick -->")])
            ],
            ("PATCH", f"{API}/issues/comments/555"): [(200, {})],
        }
    )
    ctx = github.Context.from_env(_env(tmp_path))
    assert github.post(fake, ctx, "quick", RECEIPT, 0)[-1] == "comment 555 edited"
    assert fake.sent[0][2]["state"] == "success"


def test_a_long_receipt_is_cut_under_the_limit_with_fences_closed():
    lines = [
        "### Gates: ✅ all hold — `a` against `b`",
        "",
        "<details><summary>x</summary>",
        "",
        "```",
    ]
    lines += [f"line {i} " + "x" * 80 for i in range(3000)]
    body = github.comment_body("quick", "\n".join(lines), RUN)
    assert len(body) <= github.LIMIT
    assert body.startswith("<!-- exact-gates:quick -->\n### Gates: ✅ all hold")
    assert body.count("```") % 2 == 0 and body.count("<details>") == body.count("</details>")
    assert body.rstrip().endswith(f"`receipt` artifact of {RUN}")
    short = github.comment_body("quick", RECEIPT, RUN)
    assert short == "<!-- exact-gates:quick -->\n" + RECEIPT


def test_no_receipt_is_an_error_status_and_a_note(tmp_path):
    fake = Fake(
        {
            ("POST", f"{API}/statuses/"): [(201, {})],
            ("GET", f"{API}/issues/7/comments"): [(200, [])],
            ("POST", f"{API}/issues/7/comments"): [(201, {"id": 3})],
        }
    )
    args = ["post", "--matrix", "quick", "--receipt", str(tmp_path / "none.md"), "--exit-code", "2"]
    assert github.main(args, send=fake, env=_env(tmp_path)) == 0
    assert fake.sent[0][2]["state"] == "error"
    assert fake.sent[0][2]["description"] == "no receipt: bad input (exit 2)"
    assert "no receipt" in fake.sent[2][2]["body"] and RUN in fake.sent[2][2]["body"]


def test_a_read_only_token_warns_and_does_not_fail(tmp_path, capsys):
    fake = Fake({("POST", f"{API}/statuses/"): [(403, {"message": "Resource not accessible"})]})
    args = ["post", "--matrix", "quick", "--receipt", str(tmp_path / "none.md"), "--exit-code", "0"]
    assert github.main(args, send=fake, env=_env(tmp_path)) == 0
    assert (
        "::warning::gates.report.github: could not post: status: HTTP 403"
        in capsys.readouterr().out
    )
    assert len(fake.sent) == 1


def test_without_a_pull_request_only_the_status(tmp_path):
    env = _env(tmp_path) | {"GITHUB_EVENT_PATH": "", "HEAD": SHA}
    fake = Fake({("POST", f"{API}/statuses/{SHA}"): [(201, {})]})
    ctx = github.Context.from_env(env)
    assert ctx.pr is None
    assert github.post(fake, ctx, "gpu", RECEIPT, 0) == [
        "status exact-gates/gpu: success — ❌ 1 gate failed: speed"
    ]


def test_labels_accept_cells_and_name_who_added_them(tmp_path):
    label = "gates-accept-slower:decode_cpu_s_per_token@1"
    events = [
        {"event": "labeled", "label": {"name": label}, "actor": {"login": "mallory"}},
        {"event": "unlabeled", "label": {"name": label}, "actor": {"login": "mallory"}},
        {"event": "labeled", "label": {"name": label}, "actor": {"login": "alice"}},
        {"event": "labeled", "label": {"name": "gpu"}, "actor": {"login": "bob"}},
    ]
    fake = Fake({("GET", f"{API}/issues/7/events"): [(200, events)]})
    out = tmp_path / "accept.json"
    env = _env(tmp_path, labels=[label, "gpu", "gates-accept-slower:nonsense"])
    assert github.main(["accept", "--out", str(out)], send=fake, env=env) == 0
    assert json.loads(out.read_text()) == [
        {"cell": "decode_cpu_s_per_token@1", "by": "@alice", "via": f"label {label}"}
    ]
    assert fake.sent == [("GET", f"{API}/issues/7/events?per_page=100&page=1", None)]


def test_a_real_receipt_gives_its_verdict_as_the_status(stub_repo):
    stub_repo.commit("batch bug", BATCH_BUG=True)
    code, man, md = run_gates(stub_repo)
    assert github.verdict_line(md) == man["verdict"].replace("`", "")
    assert len(github.verdict_line(md)) <= 140
    assert github.STATE[code] == "failure"
