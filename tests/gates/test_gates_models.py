"""The model axis: every gate per model, the model named in each row, the model in the result
key, ``exclude`` patterns, and models an engine cannot load (capabilities' architectures)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import SMALL, gate, run_gates
from gates import BadInput
from gates.__main__ import main
from gates.judge.kinds import KINDS
from gates.plan import build as plan
from gates.plan import matrix
from gates.plan.inputs import load_inputs
from gates.plan.request import PromptRequest

MOE_DIR = "fixtures/models/stub-moe"
TWO = SMALL.replace(
    "model: fixtures/models/stub\n",
    "",
).replace("axes:\n", f"axes:\n  model: [fixtures/models/stub, {MOE_DIR}]\n")


def add_moe_model(repo, architectures: list[str] | None = None) -> None:
    d = repo.root / MOE_DIR
    d.mkdir(parents=True, exist_ok=True)
    cfg: dict = {"vocab_size": 1000, "num_experts": 8}
    if architectures:
        cfg["architectures"] = architectures
    (d / "config.json").write_text(json.dumps(cfg))
    (repo.root / "matrices" / "two.yaml").write_text(TWO)


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "m.yaml"
    p.write_text(text)
    return p


def test_two_models_double_the_points_and_name_the_model(tmp_path):
    m = matrix.load(write(tmp_path, TWO), KINDS)
    p = plan.build(m, {"t": [PromptRequest.from_json({"id": "a", "prompt_ids": [1, 2]})]})
    assert {a.config.model for a in p.arms} == {"fixtures/models/stub", MOE_DIR}
    assert all(a.name.split()[0] in ("stub", "stub-moe") for a in p.arms)
    per_model = {c.b.config.model for c in p.comparisons if c.gate == "concurrent == solo"}
    assert per_model == {"fixtures/models/stub", MOE_DIR}
    assert all(c.a.config.model == c.b.config.model for c in p.comparisons)


def test_exclude_drops_matching_points_only(tmp_path):
    text = TWO.replace("  kv: [bf16, fp8]\n", "  kv: [bf16, fp8]\n  parallel: [1, 4]\n", 1)
    text = text.replace("  parallel: [4]\n", "")
    text += f"exclude:\n  - {{model: {MOE_DIR}, kv: fp8}}\n  - {{model: {MOE_DIR}, parallel: 1}}\n"
    m = matrix.load(write(tmp_path, text), KINDS)
    pts = m.points()
    moe = [p for p in pts if p.model == MOE_DIR]
    assert [(p.kv, p.parallel) for p in moe] == [("bf16", 4)]
    assert len(pts) - len(moe) == 4  # the dense model keeps every point


@pytest.mark.parametrize(
    ("exclude", "key", "expected"),
    [
        ("exclude: {kv: fp8}\n", "exclude", "a list of patterns"),
        ("exclude: [{}]\n", "exclude[0]", "a non-empty mapping"),
        ("exclude: [{colour: red}]\n", "exclude[0].colour", "an axis"),
        ("exclude: [{kv: f32}]\n", "exclude[0].kv", "a value of kv (bf16, fp8)"),
        ("exclude: [{model: fixtures/models/nope}]\n", "exclude[0].model", "a value of model"),
    ],
)
def test_bad_exclude_names_the_key(tmp_path, exclude, key, expected):
    p = write(tmp_path, TWO + exclude)
    with pytest.raises(BadInput) as e:
        matrix.load(p, KINDS)
    assert str(e.value).startswith(f"{p}: {key}: expected"), str(e.value)
    assert expected in str(e.value)


def test_unknown_model_directory_exits_2_naming_the_axis_key(stub_repo, capsys):
    (stub_repo.root / "matrices" / "two.yaml").write_text(TWO)
    with pytest.raises(BadInput) as e:
        load_inputs(stub_repo.root, "matrices/two.yaml", KINDS)
    assert f"two.yaml: axes.model[1]: '{MOE_DIR}' is not a directory" in str(e.value)
    code = main(["run", "--repo", str(stub_repo.root), "--matrix", "matrices/two.yaml"])
    assert code == 2
    assert "axes.model[1]" in capsys.readouterr().err


def test_a_bug_of_one_model_fails_only_that_models_rows(stub_repo):
    """Red with the stub's MOE_BUG (concurrent runs on a model with experts change a token):
    concurrent == solo fails on stub-moe and nowhere else; the receipt names the model."""
    add_moe_model(stub_repo)
    stub_repo.commit("two models")
    code, man, md = run_gates(stub_repo, matrix="matrices/two.yaml", base="main", head="main")
    assert code == 0
    stub_repo.commit("moe bug", MOE_BUG=True)
    code, man, md = run_gates(stub_repo, matrix="matrices/two.yaml")
    assert code == 1
    g = gate(man, "concurrent == solo")
    failing = [e for e in g["entries"] if e["status"] == "fail"]
    assert failing and all(e["b"].split(": ", 1)[1].startswith("stub-moe ") for e in failing)
    assert all(e["status"] == "pass" for e in g["entries"] if ": stub " in e["b"])
    assert gate(man, "flags unset == main")["status"] == "fail"
    assert "stub-moe" in md


def test_a_changed_model_reruns_only_its_own_arms(stub_repo):
    add_moe_model(stub_repo)
    stub_repo.commit("two models")
    _, man, _ = run_gates(stub_repo, matrix="matrices/two.yaml")
    assert man["matrix"]["cached"] == 0
    cfg = stub_repo.root / MOE_DIR / "config.json"
    cfg.write_text(cfg.read_text().replace("8", "4"))  # same outputs, other bytes
    _, man2, _ = run_gates(stub_repo, matrix="matrices/two.yaml")
    cached = {a["config"]["model"] for a in man2["arms"] if a["cached"]}
    fresh = {a["config"]["model"] for a in man2["arms"] if not a["cached"]}
    assert (cached, fresh) == ({"fixtures/models/stub"}, {MOE_DIR})


def test_a_model_the_base_engine_cannot_load_is_not_comparable_there(stub_repo):
    """An engine lists the architectures it loads (capabilities' architectures)."""
    add_moe_model(stub_repo, ["Qwen3MoeForCausalLM"])
    stub_repo.commit("two models, base loads dense Qwen3 only", ARCHITECTURES=["Qwen3ForCausalLM"])
    stub_repo.commit("head loads MoE", ARCHITECTURES=["Qwen3ForCausalLM", "Qwen3MoeForCausalLM"])
    code, man, _ = run_gates(stub_repo, matrix="matrices/two.yaml")
    assert code == 0
    base_moe = [a for a in man["arms"] if a["side"] == "base" and a["config"]["model"] == MOE_DIR]
    assert base_moe and all(a["status"] == "not_comparable" for a in base_moe)
    assert "no architecture Qwen3MoeForCausalLM" in base_moe[0]["reason"]
    solo = gate(man, "concurrent == solo")["entries"]
    assert any(e["status"] == "pass" and "stub-moe" in e["b"] for e in solo)
    stub_repo.commit("head drops MoE", ARCHITECTURES=["Qwen3ForCausalLM"])
    _, man, _ = run_gates(stub_repo, matrix="matrices/two.yaml", base="main~2", head="main")
    assert any(f"{MOE_DIR!r} ran on neither commit" in b for b in man["bad_values"])


def test_before_contract_5_an_engine_loads_dense_qwen3_only(stub_repo):
    """No architectures in capabilities: before contract 5 (docs/contract.md) only
    Qwen3ForCausalLM; from 5 on the engine is asked (the stub loads anything)."""
    add_moe_model(stub_repo, ["Qwen3MoeForCausalLM"])
    stub_repo.commit("two models, contract 1")
    stub_repo.commit("contract 5, no architectures listed", CONTRACT=5)
    code, man, _ = run_gates(stub_repo, matrix="matrices/two.yaml")
    assert code == 0
    nc = {(a["side"], a["config"]["model"]) for a in man["arms"] if a["status"] == "not_comparable"}
    assert nc == {("base", MOE_DIR)}
    assert any("no architecture Qwen3MoeForCausalLM" in a["reason"] for a in man["arms"])
