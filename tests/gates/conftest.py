"""A temporary git repository with the stub engine, fixtures and matrices, for gate tests."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from gates.plan.arm_config import ArmConfig
from gates.run.reply import Reply
from gates.run.results import ArmRun, Status

STUB = Path(__file__).parent / "stub_engine" / "engine"

PROMPTS = [
    *(
        {"id": f"len{n:03d}", "prompt_ids": [(7 * i + n) % 997 for i in range(n)]}
        for n in (1, 15, 16, 17, 63, 64, 65, 129)
    ),
    {"id": "text1", "prompt": "The gate runner checks out two commits."},
    {
        "id": "chat1",
        "messages": [
            {"role": "user", "content": "Name a prime number larger than ten, please."},
            {"role": "assistant", "content": "Eleven."},
            {"role": "user", "content": "And the next one?"},
        ],
    },
    {"id": "ids2turn", "prompt_ids": list(range(100, 140)), "resume_from": 24},
    *({"id": f"burst{i}", "prompt_ids": [i + 1, i + 2], "max_tokens": 1} for i in range(4)),
]

MATRIX = """
model: fixtures/models/stub
backend: numpy
prompts: t
max_tokens: 8
timeout: 60
axes:
  kv: [bf16, fp8]
  parallel: [1, 4]
  paging: [off, on]
gates:
  - name: flags unset == main
    across_commits: {}
  - name: paging == main paging
    across_commits: {paging: on}
  - name: concurrent == solo
    within_commit: {vary: parallel, reference: serial}
  - name: paging == no paging
    within_commit: {vary: paging, reference: off}
  - name: drafted == plain
    within_commit: {vary: drafter, values: [noisy], reference: none}
  - name: resumed == fresh
    resumed: {}
    where: {paging: on}
  - name: no pages at idle
    resource: {pages_in_use: 0, unplanned_allocations: 0}
"""

SMALL = """
model: fixtures/models/stub
prompts: t
max_tokens: 6
timeout: 20
axes:
  kv: [bf16, fp8]
  parallel: [4]
  paging: [on]
gates:
  - name: flags unset == main
    across_commits: {}
  - name: concurrent == solo
    within_commit: {vary: parallel, reference: serial}
  - name: no pages at idle
    resource: {pages_in_use: 0, unplanned_allocations: 0}
"""


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


class StubRepo:
    def __init__(self, root: Path) -> None:
        self.root = root

    def set_knobs(self, **knobs: object) -> None:
        path = self.root / "engine" / "knobs.py"
        text = path.read_text()
        for name, value in knobs.items():
            text, n = re.subn(rf"^{name} = .*$", f"{name} = {value!r}", text, flags=re.M)
            assert n == 1, name
        path.write_text(text)

    def hang_on(self, flag: Path) -> None:
        """fp8 arms hang while `flag` exists (each marks FLAG.hanging.PID) and no timeout
        ends them: a test waits for the marks (hangs), never for a clock."""
        flag.write_text("")
        small = self.root / "matrices" / "small.yaml"
        small.write_text(small.read_text().replace("timeout: 20", "timeout: 3600"))
        self.set_knobs(HANG_KV="fp8", HANG_FILE=str(flag))

    def commit(self, message: str, **knobs: object) -> str:
        if knobs:
            self.set_knobs(**knobs)
        git(self.root, "add", "-A")
        git(self.root, "commit", "-q", "--allow-empty", "-m", message)
        return git(self.root, "rev-parse", "HEAD")


@pytest.fixture
def stub_repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> StubRepo:
    root = tmp_path / "repo"
    root.mkdir()
    monkeypatch.setenv("GATES_CACHE", str(tmp_path / "cache"))
    shutil.copytree(STUB, root / "engine", ignore=shutil.ignore_patterns("__pycache__"))
    model = root / "fixtures" / "models" / "stub"
    model.mkdir(parents=True)
    (model / "config.json").write_text(json.dumps({"vocab_size": 1000}))
    prompts = root / "fixtures" / "prompts"
    prompts.mkdir(parents=True)
    (prompts / "t.jsonl").write_text("".join(json.dumps(p) + "\n" for p in PROMPTS))
    (root / "matrices").mkdir()
    (root / "matrices" / "t.yaml").write_text(MATRIX)
    (root / "matrices" / "small.yaml").write_text(SMALL)
    (root / ".gitignore").write_text("__pycache__/\nreceipts/\n")
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.email", "t@example.com")
    git(root, "config", "user.name", "t")
    repo = StubRepo(root)
    repo.commit("base")
    return repo


def run_gates(
    repo: StubRepo,
    *args: str,
    matrix: str = "matrices/small.yaml",
    base: str = "main~1",
    head: str = "main",
) -> tuple[int, dict, str]:
    """Run `python -m gates run` in-process; return (exit code, manifest, receipt text)."""
    from gates.__main__ import main

    out = repo.root / "receipts"
    for old in out.glob("*"):
        old.unlink()
    code = main(
        [
            "run",
            "--repo",
            str(repo.root),
            "--base",
            base,
            "--head",
            head,
            "--matrix",
            matrix,
            "--quiet",
            "--out",
            str(out),
            *args,
        ]
    )
    found = list(out.glob("*.json"))
    if not found:
        return code, {}, ""
    manifest = json.loads(found[0].read_text())
    return code, manifest, found[0].with_suffix(".md").read_text()


def hangs(flag: Path) -> int:
    """How many arms hang on `flag` now (StubRepo.hang_on)."""
    return len(list(flag.parent.glob(f"{flag.name}.hanging.*")))


def wait_until(done, proc: subprocess.Popen, what: str, limit: float = 600) -> None:
    """Poll for an event while `proc` runs; the limit only ends a run that is already broken."""
    import time

    deadline = time.monotonic() + limit
    while not done():
        assert proc.poll() is None, f"the run ended (exit {proc.returncode}) before {what}"
        assert time.monotonic() < deadline, f"no {what} in {limit:.0f} s"
        time.sleep(0.05)


def gate(manifest: dict, name: str) -> dict:
    return next(g for g in manifest["gates"] if g["name"] == name)


def ran(d: dict) -> ArmRun:
    """An ok arm run from the parts a check reads (``replies``, ``metrics``, ``trace``)."""
    return ArmRun(
        status=Status.OK,
        replies=[Reply.from_json(r) for r in d.get("replies", [])],
        metrics=d.get("metrics"),
        trace=d.get("trace"),
    )


def arm_config(**kw: object) -> ArmConfig:
    """An arm's config for a test: the matrix defaults, ``kw`` over them."""
    base: dict[str, object] = {"model": "m", "backend": "numpy", "prompts": "p", "kv": "bf16"}
    base |= {"parallel": 1, "paging": "off", "drafter": "none", "flags": {}, "max_tokens": 16}
    return ArmConfig.from_json({**base, "serial": False, "resumed": False, **kw})
