"""Unit tests: equality, speed statistics, receipts, GPU pinning."""

from __future__ import annotations

from conftest import ran, run_gates
from gates.judge.checks import equality
from gates.judge.diffs import TokensDiff
from gates.judge.results import GateResult
from gates.plan.request import PromptRequest
from gates.report.receipt import failures, render
from gates.report.view import Manifest
from gates.run.results import ArmResult, Status


def reply(rid, ids, margins=None, finish="length", **kw):
    return {
        "id": rid,
        "ids": ids,
        "margins": margins or [1.0] * len(ids),
        "finish_reason": finish,
        **kw,
    }


def test_first_difference():
    assert equality.first_difference([1, 2, 3], [1, 2, 3]) is None
    assert equality.first_difference([1, 2, 3], [1, 5, 3]) == 1
    assert equality.first_difference([1, 2], [1, 2, 3]) == 2
    assert equality.first_difference([], [7]) == 0


def test_compare_counts_and_divergence():
    a = {
        "replies": [
            reply("x", [1, 2, 3], [0.5, 0.25, 0.125]),
            reply("y", [4]),
            reply("e", [], finish="error", error="too long"),
        ]
    }
    b = {
        "replies": [
            reply("x", [1, 9, 3], [0.5, 0.005, 0.1]),
            reply("y", [4]),
            reply("e", [], finish="error", error="too long"),
        ]
    }
    hi = PromptRequest.from_json({"id": "x", "prompt": "hi"})
    got = equality.compare(ran(a), ran(b), requests={"x": hi})
    assert (got.matched, got.total) == (1, 2)
    assert got.skipped[0].id == "e"
    d = got.diffs[0]
    assert isinstance(d, TokensDiff)
    assert (d.id, d.index, d.a_ids, d.b_ids) == ("x", 1, (2, 3), (9, 3))
    assert (d.a_margin, d.b_margin) == (0.25, 0.005)
    assert equality.describe_margin(d.a_margin, d.b_margin) == "a near-tie"
    line = failures._diff_line(d, "base", "head")
    assert "tokens differ from index 1" in line and "[2, 3]" in line and "[9, 3]" in line
    assert "margin at 1: base 0.25, head 0.005 (" in line and "a near-tie)" in line


def test_compare_error_on_one_side_and_missing_reply():
    a = {"replies": [reply("x", [1]), reply("y", [2])]}
    b = {"replies": [reply("x", [1], finish="error", error="boom")]}
    got = equality.compare(ran(a), ran(b))
    assert (got.matched, got.total) == (0, 2)
    assert {d.id for d in got.diffs} == {"x", "y"}
    assert got.diffs[0].to_json()["error"] == {"a": None, "b": "boom"}
    only = equality.compare(ran(a), ran(b), only_ids=["y"])
    assert only.total == 1


def test_decoder_from_tokenizer_json():
    from pathlib import Path

    model = Path(__file__).resolve().parents[2] / "fixtures" / "models" / "tiny-qwen3"
    decode = equality.make_decoder(model)
    if decode is None:
        return  # no tokenizer package here: receipts fall back to the whole reply's text
    assert isinstance(decode([40, 41]), str)


def test_verdict_exit_codes():
    def man(*states, arms=()):
        return {
            "gates": [
                GateResult(f"g{i}", "across_commits", Status(s), 0, 0) for i, s in enumerate(states)
            ],
            "arms": list(arms),
            "speed": None,
        }

    assert render.verdict(Manifest.parse(man("pass", "not_comparable")))[1] == 0
    assert render.verdict(Manifest.parse(man("pass", "fail")))[1] == 1
    crash = [ArmResult("a", status=Status.CRASHED)]
    assert render.verdict(Manifest.parse(man("pass", "could_not_run", arms=crash)))[1] == 3
    assert render.verdict(Manifest.parse(man("fail", "could_not_run", arms=crash)))[1] == 1
    assert render.verdict(Manifest.parse(man("not_comparable")))[1] == 3
    speed = man("pass")
    speed["speed"] = {"status": "fail"}
    assert render.verdict(Manifest.parse(speed)) == ("❌ 1 gate failed: speed", 1)


def test_one_arm_per_gpu(stub_repo, monkeypatch):
    m = (stub_repo.root / "matrices" / "small.yaml").read_text()
    (stub_repo.root / "matrices" / "gpu.yaml").write_text("backend: cupy\n" + m)
    stub_repo.commit("gpu")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    code, man, _ = run_gates(stub_repo, matrix="matrices/gpu.yaml")
    assert code == 0
    assert man["matrix"]["devices"] == ["3", "5"] and man["matrix"]["workers"] == 2
    devices = {a["metrics"]["device"] for a in man["arms"] if a.get("metrics")}
    assert devices <= {"3", "5"} and devices
    assert all(a["metrics"]["threads"] is None for a in man["arms"] if a.get("metrics"))


def test_cpu_arms_are_single_threaded(stub_repo):
    stub_repo.commit("head")
    code, man, _ = run_gates(stub_repo)
    assert code == 0
    assert {a["metrics"]["threads"] for a in man["arms"] if a.get("metrics")} == {"1"}


def test_jobs_on_a_cuda_backend_is_arms_per_gpu(monkeypatch):
    from gates.pipeline import workers

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0, 1")
    assert workers({"cupy"}, None) == (2, ["0", "1"])
    assert workers({"cupy"}, 3) == (6, ["0", "1", "0", "1", "0", "1"])
    assert workers({"numpy"}, 3) == (3, None)


def test_a_crashed_arms_progress_line_says_why() -> None:
    """The progress line says why an arm crashed or was refused as it happens, before any
    receipt (a machine taken back mid-run may leave nothing else)."""
    import io

    from gates.run.execute import Progress
    from gates.run.results import ArmRun

    stream = io.StringIO()
    progress = Progress(total=3, cached=0, stream=stream)
    tail = "Traceback (most recent call last):\n  ...\nRuntimeError: CUDA out of memory\n\n"
    crashed = ArmRun(status=Status.CRASHED, reason="engine exited 1", wall_s=1.6, stderr_tail=tail)
    progress.update("head: kv=fp8 p=1", crashed)
    progress.update("base: kv=fp8 p=1", ArmRun(status=Status.OK, wall_s=2.0))
    why = "refused (exit 2): --kv fp8 needs cupy"
    refused = ArmRun(
        status=Status.REFUSED, reason=why, wall_s=0.4, stderr_tail="--kv fp8 needs cupy\n"
    )
    progress.update("head: kv=fp8 p=2", refused)
    first, second, third = stream.getvalue().splitlines()
    assert first.endswith("CRASHED 1.6s: engine exited 1; RuntimeError: CUDA out of memory")
    assert second.endswith("· base: kv=fp8 p=1: ok 2.0s")
    assert third.endswith(": REFUSED 0.4s: refused (exit 2): --kv fp8 needs cupy")  # said once
    assert "(0 cached, 1 crashed," in third  # the refusal is not counted as a crash
