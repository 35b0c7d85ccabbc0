"""Matrix validation and arm planning."""

from __future__ import annotations

from pathlib import Path

import pytest

from gates import BadInput
from gates.__main__ import main
from gates.judge.kinds import KINDS
from gates.plan import build as plan
from gates.plan import matrix, prompts
from gates.plan.request import PromptRequest

REPO = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "m.yaml"
    p.write_text(text)
    return p


BASE = "model: m\nprompts: p\ngates:\n  - name: g\n    across_commits: {}\n"


@pytest.mark.parametrize(
    ("text", "key", "expected"),
    [
        ("[1, 2]", "(top level)", "a mapping"),
        (BASE + "bogus: 1\n", "bogus", "one of"),
        ("model: m\nprompts: p\n", "gates", "a non-empty list of gates"),
        (BASE + "axes:\n  parallel: [1, 0]\n", "axes.parallel[1]", "a positive integer"),
        (BASE + "axes:\n  paging: [maybe]\n", "axes.paging[0]", "on, off or a number of pages"),
        (BASE + "axes:\n  colour: [red]\n", "axes.colour", "an axis"),
        (BASE + "axes:\n  flags: [{FOO: 1}]\n", "axes.flags[0].FOO", "starting with ENGINE_"),
        (BASE + "axes:\n  model: [a]\n", "axes.model", "either at the top level or in axes"),
        ("prompts: p\ngates: [{name: g, across_commits: {}}]\n", "model", "a model"),
        ("model: m\nprompts: p\ngates: [{name: g}]\n", "gates[0]", "exactly one rule kind"),
        (
            "model: m\nprompts: p\ngates: [{name: g, within_commit: {vary: colour}}]\n",
            "gates[0].within_commit.vary",
            "one of kv, parallel",
        ),
        (
            "model: m\nprompts: p\ngates: [{name: g, within_commit: {vary: kv}}]\n",
            "gates[0].within_commit.reference",
            "the reference value of kv",
        ),
        (
            "model: m\nprompts: p\ngates: [{name: g, resource: {pages_in_use: -1}}]\n",
            "gates[0].resource.pages_in_use",
            "a non-negative integer",
        ),
        (BASE + "max_tokens: many\n", "max_tokens", "a int"),
        (BASE + "drafter_models: [x]\n", "drafter_models", "a mapping of drafter name"),
        (BASE + "speed: {runs: 0}\n", "speed.runs", "at least 1"),
        (
            BASE + "  - name: g\n    across_commits: {}\n",
            "gates[1].name",
            "a name not used by another gate",
        ),
    ],
)
def test_bad_matrix_names_file_key_and_expectation(tmp_path, text, key, expected):
    p = write(tmp_path, text)
    with pytest.raises(BadInput) as e:
        matrix.load(p, KINDS)
    msg = str(e.value)
    assert msg.startswith(f"{p}: {key}: expected"), msg
    assert expected in msg


def test_bad_matrix_exits_2(tmp_path, capsys):
    p = write(tmp_path, BASE + "axes:\n  kv: bf16\n")
    assert main(["run", "--repo", str(REPO), "--matrix", str(p)]) == 2
    err = capsys.readouterr().err
    assert "axes.kv: expected a list of values" in err and str(p) in err


def test_yaml_on_off_and_flags_normalised(tmp_path):
    text = BASE + "axes:\n  paging: [off, on]\n  flags: [{}, {ENGINE_X: true}]\n"
    m = matrix.load(write(tmp_path, text), KINDS)
    assert m.axes["paging"] == ["off", "on"]
    assert m.axes["flags"] == [{}, {"ENGINE_X": "true"}]
    assert len(m.points()) == 4


@pytest.mark.parametrize("name", ["quick", "fake", "default", "full", "gpu"])
def test_bundled_matrices_load_and_plan(name):
    m = matrix.load(REPO / "matrices" / f"{name}.yaml", KINDS)
    sets = {n: prompts.load(prompts.resolve_path(REPO, n)) for n in m.prompt_sets()}
    p = plan.build(m, sets)
    assert p.arms and p.comparisons and not p.notes
    names = {g.name for g in m.gates}
    checks = [*p.comparisons, *p.checks, *p.pairs]
    assert {c.gate for c in checks} == names


def test_quick_matrix_is_small():
    m = matrix.load(REPO / "matrices" / "quick.yaml", KINDS)
    sets = {n: prompts.load(prompts.resolve_path(REPO, n)) for n in m.prompt_sets()}
    arms = plan.build(m, sets).arms
    assert len(arms) <= 66  # 43 dense, 22 MoE (bf16 only, no scheduler arms)
    moe = [a for a in arms if a.config.model == "fixtures/models/tiny-qwen3-moe"]
    assert 0 < len(moe) <= len(arms) // 2  # a slice: not a second quick
    assert m.axes["backend"] == ["numpy"]


@pytest.mark.parametrize("name", ["quick", "default", "gpu"])
def test_every_equality_gate_runs_on_the_moe_model(name):
    m = matrix.load(REPO / "matrices" / f"{name}.yaml", KINDS)
    sets = {n: prompts.load(prompts.resolve_path(REPO, n)) for n in m.prompt_sets()}
    p = plan.build(m, sets)
    moe = "fixtures/models/tiny-qwen3-moe"
    kinds = {g.name: g.kind for g in m.gates}
    on_moe = {c.gate for c in p.comparisons if c.b.config.model == moe}
    on_moe |= {c.gate for c in p.checks if c.arm.config.model == moe}
    on_moe |= {c.gate for c in p.pairs if c.b.config.model == moe}
    assert {n for n, k in kinds.items() if not k.startswith("schedule")} == on_moe


def test_plan_rules(tmp_path):
    text = """
model: m
prompts: p
axes: {kv: [bf16, fp8], parallel: [1, 4], paging: [off, on], flags: [{}, {ENGINE_X: 1}]}
gates:
  - {name: main, across_commits: {}}
  - {name: solo, within_commit: {vary: parallel, reference: serial}}
  - name: drafted
    within_commit: {vary: drafter, values: [mtp], reference: none}
    where: {kv: fp8}
  - {name: resumed, resumed: {}, where: {paging: on}}
  - {name: pages, resource: {}}
"""
    m = matrix.load(write(tmp_path, text), KINDS)
    sets = {"p": [PromptRequest.from_json({"id": "a", "prompt_ids": [1, 2, 3], "resume_from": 2})]}
    p = plan.build(m, sets)
    main_c = [c for c in p.comparisons if c.gate == "main"]
    assert len(main_c) == 8  # flags left unset
    assert all(
        c.a.side == "base" and c.b.side == "head" and c.a.config_json == c.b.config_json
        for c in main_c
    )
    assert all(c.a.config.flags == {} for c in main_c)
    solo = [c for c in p.comparisons if c.gate == "solo"]
    assert len(solo) == 16 and all(c.a.config.serial and c.a.config.parallel == 1 for c in solo)
    drafted = [c for c in p.comparisons if c.gate == "drafted"]
    assert len(drafted) == 8 and all(c.b.config.drafter == "mtp" for c in drafted)
    resumed = [c for c in p.comparisons if c.gate == "resumed"]
    assert len(resumed) == 4 and all(c.only_ids == ["a"] for c in resumed)
    assert all(c.b.config.resumed and c.a.config.serial for c in resumed)
    assert {c.arm.side for c in p.checks} == {"head"}
    assert len(p.arms) == len(set(p.arms))


def test_drafter_models_reach_the_arms_of_that_drafter(tmp_path):
    text = BASE + "axes: {drafter: [none, block, noisy]}\ndrafter_models: {block: d/blk}\n"
    m = matrix.load(write(tmp_path, text), KINDS)
    p = plan.build(m, {"p": [PromptRequest.from_json({"id": "a", "prompt_ids": [1]})]})
    by = {a.config.drafter: a.config for a in p.arms}
    assert by["block"].drafter_model == "d/blk"
    assert by["none"].drafter_model is None and by["noisy"].drafter_model is None
    assert "drafter_model" not in by["none"].to_json()


def test_resumed_requests_send_first_turns_first():
    s = [
        {
            "id": "c",
            "messages": [
                {"role": "user", "content": "a"},
                {"role": "assistant", "content": "b"},
                {"role": "user", "content": "c"},
            ],
        },
        {"id": "i", "prompt_ids": [5, 6, 7, 8], "resume_from": 2, "note": "x"},
        {"id": "plain", "prompt_ids": [1], "max_tokens": 1},
    ]
    typed = [PromptRequest.from_json(d) for d in s]
    reqs = [r.to_json() for r in prompts.requests_for(typed, 9, resumed=True)]
    assert [r["id"] for r in reqs] == ["c/turn1", "i/turn1", "c", "i", "plain"]
    assert reqs[0]["messages"] == s[0]["messages"][:1]
    assert (
        reqs[1]["prompt_ids"] == [5, 6] and "resume_from" not in reqs[1] and "note" not in reqs[3]
    )
    assert reqs[4]["max_tokens"] == 1 and reqs[2]["max_tokens"] == 9
    # the lines keep their keys' order: the turn's prompt and id where the request had them
    assert list(reqs[1]) == ["id", "prompt_ids", "max_tokens"]
    assert (typed[1].note, typed[1].resume_from, typed[2].max_tokens) == ("x", 2, 1)


@pytest.mark.parametrize(
    ("line", "msg"),
    [
        ('{"id": "a"}', "exactly one of prompt, prompt_ids, messages"),
        ('{"prompt": "x"}', "id: expected a non-empty string"),
        ('{"id": "a", "prompt_ids": []}', "prompt_ids: expected a non-empty list"),
        ('{"id": "a", "prompt_ids": [1, 2], "resume_from": 2}', "resume_from"),
        ("not json", "not JSON"),
        ('{"id": "ok", "prompt": "y"}', "id: 'ok' is used twice"),
        ('{"id": "a", "prompt": 5}', "prompt: expected a string, got 5"),
        ('{"id": "a", "prompt": "x", "max_tokens": "5"}', "max_tokens: expected an int"),
        ('{"id": "a", "prompt": "x", "max_tokens": true}', "max_tokens: expected an int"),
        ('{"id": "a", "prompt": "x", "arrival": "soon"}', "arrival: expected a number"),
        ('{"id": "a", "prompt": "x", "note": 3}', "note: expected a string"),
        ('{"id": "a", "messages": ["hi"]}', "messages: expected a list of objects"),
    ],
)
def test_bad_prompt_set(tmp_path, line, msg):
    p = tmp_path / "p.jsonl"
    p.write_text('{"id": "ok", "prompt": "x"}\n' + line + "\n")
    with pytest.raises(BadInput, match=f"{p}:2: .*{msg}"):
        prompts.load(p)


def test_bundled_prompt_sets_straddle_edges():
    edges = prompts.load(REPO / "fixtures" / "prompts" / "edges.jsonl")
    lengths = {len(r.prompt_ids) for r in edges if r.prompt_ids is not None}
    assert {1, 15, 16, 17, 63, 64, 65, 129} <= lengths
    assert all(i < 1000 for r in edges for i in r.prompt_ids or ())
    chats = prompts.load(REPO / "fixtures" / "prompts" / "chats.jsonl")
    assert len(prompts.resumable_ids(chats)) == len(chats)
    bursts = prompts.load(REPO / "fixtures" / "prompts" / "bursts.jsonl")
    assert sum(r.max_tokens == 1 for r in bursts) >= 16


def test_the_engine_request_file_is_each_lines_json_with_its_keys_sorted():
    """The bytes that are hashed into the result store's keys (as before requests were
    typed): each engine line's JSON, keys sorted, the arm's max_tokens where the line
    names none, the harness keys gone; to_json gives the line back as it was read."""
    a = {"prompt": "é x", "id": "a", "note": "n"}
    b = {"id": "b", "prompt_ids": [3, 1], "max_tokens": 2, "arrival": 0.5, "seed": 9}
    s = [PromptRequest.from_json(d) for d in (a, b)]
    assert [list(r.to_json()) for r in s] == [list(a), list(b)]
    assert (s[0].prompt, s[1].prompt_ids, s[1].arrival, s[0].arrival) == ("é x", (3, 1), 0.5, 0)
    assert prompts.encode(prompts.requests_for(s, 7)) == (
        b'{"id": "a", "max_tokens": 7, "prompt": "\\u00e9 x"}\n'
        b'{"arrival": 0.5, "id": "b", "max_tokens": 2, "prompt_ids": [3, 1], "seed": 9}\n'
    )
