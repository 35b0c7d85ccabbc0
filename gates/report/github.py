"""``python -m gates.report.github``: the receipt back on the pull request (GitHub REST,
stdlib urllib).

``post``: ONE comment per matrix on the PR, found by a hidden marker
(``<!-- exact-gates:quick -->``) and edited in place on every push, its body under GitHub's
65,536 characters (a longer receipt is cut at a line, with a link to the run, whose job
summary and artifact hold it whole); and a commit status on the head SHA, context
``exact-gates/<matrix>``, with the receipt's one-line verdict. ``accept``: the PR's
``gates-accept-slower:<cell>`` labels, with who added each, as the JSON file that ``gates
run --accept`` reads (gates/report/accept.py).

Every request goes through a ``Transport``; tests pass a fake one that records the requests
and answers from recorded responses, so no test calls GitHub.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from gates import EXIT_BAD_INPUT, BadInput
from gates.jsontypes import JsonObject
from gates.report.accept import CELL, LABEL

LIMIT = 65_536  # GitHub refuses a comment body longer than this
STATE = {0: "success", 1: "failure", 2: "error", 3: "error"}


class Transport(Protocol):
    def __call__(self, method: str, url: str, body: JsonObject | None) -> tuple[int, Any]: ...


def urllib_transport(token: str) -> Transport:
    def send(method: str, url: str, body: JsonObject | None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(url, data=data, method=method)
        req.add_header("Accept", "application/vnd.github+json")
        req.add_header("Authorization", f"Bearer {token}")
        req.add_header("X-GitHub-Api-Version", "2022-11-28")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                raw = r.read()
                return r.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as e:
            return e.code, {"message": e.read().decode(errors="replace")[:300]}

    return send


@dataclass
class Context:
    """Where to post: from the Actions environment (``GITHUB_*``) and the event payload."""

    api: str
    repo: str
    sha: str
    pr: int | None
    run_url: str
    labels: list[str] = field(default_factory=list)

    @classmethod
    def from_env(cls, env: dict[str, str]) -> Context:
        event: JsonObject = {}
        if env.get("GITHUB_EVENT_PATH"):
            event = json.loads(Path(env["GITHUB_EVENT_PATH"]).read_text())
        pull = event.get("pull_request") or {}
        repo = env.get("GITHUB_REPOSITORY") or ""
        if not repo:
            raise BadInput("GITHUB_REPOSITORY is not set: run inside GitHub Actions")
        server = env.get("GITHUB_SERVER_URL", "https://github.com")
        return cls(
            api=env.get("GITHUB_API_URL", "https://api.github.com"),
            repo=repo,
            sha=env.get("HEAD") or (pull.get("head") or {}).get("sha") or env.get("GITHUB_SHA", ""),
            pr=pull.get("number"),
            run_url=f"{server}/{repo}/actions/runs/{env.get('GITHUB_RUN_ID', '')}",
            labels=[lb["name"] for lb in pull.get("labels") or []],
        )


def marker(matrix: str) -> str:
    return f"<!-- exact-gates:{matrix} -->"


def comment_body(matrix: str, receipt: str | None, run_url: str, limit: int = LIMIT) -> str:
    """The marker, then the receipt; cut at a line (closing an open fence or <details>) with
    a pointer to the run's job summary and artifact when it would pass ``limit``."""
    head = f"{marker(matrix)}\n"
    if receipt is None:
        note = "The gates wrote no receipt (exit 2: bad input); see the job log"
        return f"{head}### Gates ({matrix}): ⚠️ no receipt\n\n{note}: {run_url}\n"
    tail = (
        "\n\n… cut here to fit a comment: the whole receipt is in the job summary and the "
        f"`receipt` artifact of {run_url}\n"
    )
    if len(head) + len(receipt) <= limit:
        return head + receipt
    room = limit - len(head) - len(tail) - 200
    cut = receipt.rfind("\n", 0, room)
    text = receipt[: cut if cut > 0 else room]
    if len(re.findall(r"(?m)^ *`{3,}[ \t]*$", text)) % 2:
        text += "\n```"
    text += "\n\n</details>" * max(0, text.count("<details>") - text.count("</details>"))
    return head + text + tail


def verdict_line(receipt: str | None) -> str:
    """The receipt's headline without the Markdown, as a status description (≤ 140)."""
    if receipt is None:
        return "no receipt: bad input (exit 2)"
    first = receipt.splitlines()[0] if receipt else ""
    line = re.sub(r"^#+\s*Gates:\s*", "", first).split(" — `")[0].replace("`", "")
    return line if len(line) <= 140 else line[:139] + "…"


def _pages(send: Transport, url: str) -> list[JsonObject]:
    out: list[JsonObject] = []
    for page in range(1, 51):
        code, got = send("GET", f"{url}?per_page=100&page={page}", None)
        if code != 200 or not isinstance(got, list):
            raise OSError(f"GET {url}: HTTP {code}: {got}")
        out += got
        if len(got) < 100:
            break
    return out


def upsert_comment(send: Transport, ctx: Context, matrix: str, body: str) -> tuple[str, int]:
    """Edit the PR's comment with this matrix's marker, or make it: (action, comment id)."""
    base = f"{ctx.api}/repos/{ctx.repo}"
    comments = _pages(send, f"{base}/issues/{ctx.pr}/comments")
    mine = [c for c in comments if marker(matrix) in (c.get("body") or "")]
    if mine:
        cid = mine[0]["id"]
        code, got = send("PATCH", f"{base}/issues/comments/{cid}", {"body": body})
        action = "edited"
    else:
        code, got = send("POST", f"{base}/issues/{ctx.pr}/comments", {"body": body})
        action, cid = "made", (got or {}).get("id", 0)
    if code not in (200, 201):
        raise OSError(f"comment: HTTP {code}: {got}")
    return action, cid


def set_status(send: Transport, ctx: Context, matrix: str, exit_code: int, line: str) -> None:
    payload = {
        "state": STATE.get(exit_code, "error"),
        "context": f"exact-gates/{matrix}",
        "description": line,
        "target_url": ctx.run_url,
    }
    code, got = send("POST", f"{ctx.api}/repos/{ctx.repo}/statuses/{ctx.sha}", payload)
    if code != 201:
        raise OSError(f"status: HTTP {code}: {got}")


def post(
    send: Transport, ctx: Context, matrix: str, receipt: str | None, exit_code: int
) -> list[str]:
    """Status first (it gates the merge), then the comment (a PR only). Returns what it did."""
    line = verdict_line(receipt)
    set_status(send, ctx, matrix, exit_code, line)
    done = [f"status exact-gates/{matrix}: {STATE.get(exit_code, 'error')} — {line}"]
    if ctx.pr is not None:
        action, cid = upsert_comment(send, ctx, matrix, comment_body(matrix, receipt, ctx.run_url))
        done.append(f"comment {cid} {action}")
    return done


def acceptances(send: Transport, ctx: Context) -> list[dict[str, str]]:
    """The PR's ``gates-accept-slower:<cell>`` labels and who added each (its last
    ``labeled`` event)."""
    wanted = [lb for lb in ctx.labels if lb.startswith(LABEL)]
    if not wanted or ctx.pr is None:
        return []
    events = _pages(send, f"{ctx.api}/repos/{ctx.repo}/issues/{ctx.pr}/events")
    out = []
    for lb in wanted:
        cell = lb.removeprefix(LABEL).strip()
        if not CELL.match(cell):
            print(
                f"gates.report.github: label {lb!r}: not a speed cell (metric@streams); ignored",
                file=sys.stderr,
            )
            continue
        adds = [
            e
            for e in events
            if e.get("event") == "labeled" and (e.get("label") or {}).get("name") == lb
        ]
        who = f"@{adds[-1]['actor']['login']}" if adds and adds[-1].get("actor") else "unknown"
        out.append({"cell": cell, "by": who, "via": f"label {lb}"})
    return out


def main(
    argv: list[str] | None = None, send: Transport | None = None, env: dict[str, str] | None = None
) -> int:
    p = argparse.ArgumentParser(prog="python -m gates.report.github")
    sub = p.add_subparsers(dest="cmd", required=True)
    po = sub.add_parser("post", help="one PR comment per matrix, and a commit status")
    po.add_argument("--matrix", required=True)
    po.add_argument("--receipt", required=True, help="the receipt .md (missing: a note)")
    po.add_argument("--exit-code", type=int, required=True)
    ac = sub.add_parser("accept", help="the PR's gates-accept-slower labels as a JSON file")
    ac.add_argument("--out", required=True)
    a = p.parse_args(argv)
    env = dict(os.environ) if env is None else env
    try:
        ctx = Context.from_env(env)
        send = send or urllib_transport(env.get("GITHUB_TOKEN") or env.get("GH_TOKEN") or "")
        if a.cmd == "accept":
            try:
                got = acceptances(send, ctx)
            except OSError as e:  # no labels read: none accepted, the gates still run
                print(f"::warning::gates.report.github: could not read the PR's labels: {e}")
                got = []
            Path(a.out).write_text(json.dumps(got, indent=1) + "\n")
            print(f"gates.report.github: {len(got)} accepted slower cell(s) -> {a.out}")
            return 0
        path = Path(a.receipt)
        receipt = path.read_text() if path.is_file() else None
        for line in post(send, ctx, a.matrix, receipt, a.exit_code):
            print(f"gates.report.github: {line}")
    except BadInput as e:
        print(f"gates.report.github: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as e:  # a fork's read-only token, GitHub down: the gates' verdict stands
        print(f"::warning::gates.report.github: could not post: {e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
