"""Served arms: the `served` rule, the request lines a client can send, and `engine serve`
of this repository driven through the openai client against `engine run` (ids and bits),
including a server bug planted in a copy that only the served arm can see."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conftest import gate, run_gates
from gates import BadInput
from gates.judge.checks import equality
from gates.judge.kinds import KINDS
from gates.judge.kinds.resource import RESOURCE_LIMITS
from gates.plan import build as plan
from gates.plan import matrix, prompts
from gates.plan.arm_config import ArmConfig
from gates.plan.request import PromptRequest
from gates.power import plants
from gates.run import contract, served
from gates.run.capabilities import Serve
from gates.run.execute import ArmJob, base_env, capabilities, run_arm

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "fixtures" / "models" / "tiny-qwen3"
SERVE_PLANTS = [p for p in plants.PLANTS if p.edits[0].file.startswith("engine/serve/")]

RULES = """
model: m
prompts: p
axes: {kv: [bf16, fp8], parallel: [1, 4], flags: [{}, {ENGINE_X: 1}]}
gates:
  - {name: offline, served: {stream: [true, false], parallel: 2}, where: {kv: bf16}}
  - {name: main, served: {against: main}, where: {kv: bf16, parallel: 4}}
  - {name: solo, served: {against: solo, stream: false}, where: {kv: fp8, parallel: 4}}
  - {name: pages, resource: {}}
"""


def test_served_rules_plan_their_arms(tmp_path):
    (tmp_path / "m.yaml").write_text(RULES)
    m = matrix.load(tmp_path / "m.yaml", KINDS)
    p = plan.build(m, {"p": [PromptRequest.from_json({"id": "a", "prompt_ids": [1, 2]})]})
    by = {g: [c for c in p.comparisons if c.gate == g] for g in ("offline", "main", "solo")}
    # 2 flag sets x 2 modes; both parallel points fold into the rule's parallel 2
    assert len(by["offline"]) == 4
    for c in by["offline"]:
        assert c.a.side == c.b.side == "head" and c.a.config.served is None
        assert c.a.config.replace(served=c.b.config.served) == c.b.config
        assert c.b.config.parallel == 2
    assert {c.b.config.served for c in by["offline"]} == {"stream", "plain"}
    (main_c,) = by["main"]  # flags left unset, like across_commits
    assert (main_c.a.side, main_c.b.side) == ("base", "head")
    assert main_c.a.config == main_c.b.config and main_c.b.config.flags == {}
    assert len(by["solo"]) == 2
    for c in by["solo"]:
        assert c.a.config.serial and c.a.config.served == "plain"
        assert c.b.config.parallel == 4 and not c.b.config.serial
    assert any("served=stream" in a.name for a in p.arms)
    served_arms = [a for a in p.arms if a.config.served and a.side == "head"]
    assert {c.arm for c in p.checks} >= set(served_arms)  # the resource gate holds them too


@pytest.mark.parametrize(
    ("body", "key"),
    [
        ("{against: nobody}", "gates[0].served.against"),
        ("{stream: yes please}", "gates[0].served.stream"),
        ("{clients: 3}", "gates[0].served.clients"),
        ("{against: main, commits: [head]}", "gates[0].served.commits"),
    ],
)
def test_a_bad_served_rule_names_its_key(tmp_path, body, key):
    (tmp_path / "m.yaml").write_text(f"model: m\nprompts: p\ngates: [{{name: g, served: {body}}}]")
    with pytest.raises(BadInput, match=key.replace("[", r"\[").replace("]", r"\]")):
        matrix.load(tmp_path / "m.yaml", KINDS)


def test_lines_a_client_cannot_send_are_left_out_with_a_reason():
    serve = Serve(request_keys=("prompt", "max_tokens", "temperature", "seed", "stop_ids"))
    ok = {"id": "a", "prompt": "x", "max_tokens": 3, "seed": 2, "cancel_after": 1}

    def why(**more: object) -> str | None:
        return served.unservable(PromptRequest.from_json({**ok, **more}), serve)

    assert why() is None
    assert why(kind="embed") == "the served API has no embed kind"
    assert "cancel_after_rows" in (why(cancel_after_rows=4) or "")
    assert "priority" in (why(priority="background") or "")


def test_a_server_without_the_bits_is_not_comparable(stub_repo):
    text = (stub_repo.root / "matrices" / "small.yaml").read_text()
    text += "  - name: served == offline\n    served: {parallel: 2}\n"
    (stub_repo.root / "matrices" / "small.yaml").write_text(text)
    stub_repo.commit("served rule")
    code, man, md = run_gates(stub_repo)
    g = gate(man, "served == offline")
    assert g["status"] == "not_comparable", g
    assert "contract 3: serve" in g["entries"][0]["reason"]
    assert code == 0


LINES = [
    {"id": "text", "prompt": "Return the", "max_tokens": 6},
    {"id": "sampled", "prompt_ids": [5, 6, 7, 8], "max_tokens": 8, "temperature": 0.9, "seed": 7},
    {"id": "chat", "messages": [{"role": "user", "content": "What does open return?"}]},
    {"id": "cancel", "prompt_ids": list(range(40, 80)), "max_tokens": 12, "cancel_after": 2},
    {"id": "stop", "prompt": "Raise ValueError if", "stop_ids": [13], "priority": "background"},
    {"id": "late", "prompt_ids": [3, 4], "arrival": 0.05, "ignore_eos": True, "max_tokens": 5},
    {"id": "toolong", "prompt_ids": [9] * 1030, "max_tokens": 2},
]
TYPED = [PromptRequest.from_json(d) for d in LINES]


def job(tmp_path: Path, worktree: Path, mode: str | None, name: str) -> ArmJob:
    cfg = ArmConfig(
        model="tiny",
        backend="numpy",
        prompts="t",
        kv="bf16",
        parallel=2,
        paging="on",
        pages=160,
        drafter="none",
        flags={},
        max_tokens=6,
        serial=False,
        resumed=False,
        served=mode or None,
    )
    return ArmJob(
        key=name,
        label=name,
        worktree=worktree,
        config=cfg,
        model=MODEL,
        requests=prompts.encode(prompts.requests_for(TYPED, 6)),
        timeout=120,
        workdir=tmp_path / "runs" / name,
        env=base_env(worktree, "numpy", {}, tmp_path / "cache"),
        runner=served.run_served if mode else None,
    )


@pytest.mark.skipif(not MODEL.is_dir(), reason="no bundled model")
def test_served_equals_offline_and_planted_server_bugs_show(tmp_path):
    assert {p.name for p in SERVE_PLANTS} == {
        "serve-seed-misread",
        "serve-stream-drops-last",
        "serve-length-as-stop",
    }
    caps, why = capabilities(REPO, tmp_path / "cache")
    assert caps is not None, why
    for line in TYPED:
        assert served.unservable(line, caps.serve) is None, line
    offline = run_arm(job(tmp_path, REPO, None, "offline"))
    assert offline.ok, offline
    for mode in ("stream", "plain"):
        got = served.run_served(job(tmp_path, REPO, mode, mode))
        assert got.ok, got
        cmp = equality.compare(offline, got)
        assert (cmp.matched, cmp.total) == (len(LINES) - 1, len(LINES) - 1), cmp.diffs
        assert [s.id for s in cmp.skipped] == ["toolong"]  # an error on both sides
        by = {r.id: r for r in got.replies or []}
        assert len(by["cancel"].ids) == 2 and by["cancel"].logit_hashes
        m = got.metrics or {}
        assert (m["live_streams"], m["waiting_streams"], m["pages_in_use"]) == (0, 0, 0)
    for plant in SERVE_PLANTS:  # server bugs of the power catalog: only served arms see them
        root = tmp_path / plant.name
        shutil.copytree(REPO / "engine", root / "engine", ignore=shutil.ignore_patterns("__py*"))
        plants.apply(plant, root)
        bad = served.run_served(job(tmp_path, root, "stream", plant.name))
        assert bad.ok, bad
        cmp = equality.compare(offline, bad)
        want = ["sampled"] if plant.name == "serve-seed-misread" else None
        got_ids = [d.id for d in cmp.diffs]
        assert got_ids == want if want else len(got_ids) >= 3, (plant.name, got_ids)
        if plant.name == "serve-length-as-stop":  # same ids and bits: only the finish differs
            assert {(d.KIND, getattr(d, "field", None)) for d in cmp.diffs} == {
                ("fields", "finish_reason")
            }
            assert {d.id for d in cmp.diffs} >= {"text", "sampled", "late"}


def test_the_real_server_lists_what_a_served_arm_sends_and_reads(tmp_path):
    from test_gates_contract import caps_of, engine_cli, widest_config

    caps, why = capabilities(REPO, tmp_path / "cache")
    assert caps is not None, why
    serve = caps.serve
    assert serve is not None
    assert set(contract.SERVE_CHOICE_KEYS) <= set(serve.choice_keys or ())
    assert {"temperature", "seed", *served.EXTRA_BODY} <= set(serve.request_keys or ())
    assert set(RESOURCE_LIMITS) <= set(caps_of(REPO)["serve"]["metrics_keys"])
    cfg = widest_config(caps).replace(drafter="mtp", served="stream")
    assert contract.missing(caps, cfg) is None
    assert "no served noisy" in (contract.missing(caps, cfg.replace(drafter="noisy")) or "")
    usage = engine_cli(REPO, "serve", "--help")
    sent = [a for a in contract.engine_args(cfg) if a.startswith("--") and a != "--serial"]
    assert not [f for f in [*sent, "--host", "--port"] if f not in usage], usage
