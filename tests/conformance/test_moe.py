"""A random Qwen3-MoE (4 layers, 8 experts, top-3, layer 1 dense, an MoE MTP layer) on each
backend: concurrent == solo, prompt cuts, paging, fp8, resumed == fresh, MTP- and
block-drafted == plain, bit for bit against the same backend's solo replies. Top-3 so that
the order of a row's expert sum can show (with two terms a + b == b + a)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from engine.config import EngineConfig
from engine.draft.block import BlockDrafter
from engine.draft.mtp import MtpDrafter
from engine.errors import EngineFailure, InputError
from engine.lanes.engine import Engine
from engine.lanes.request import Request
from engine.model.qwen3 import build
from engine.ops import BACKENDS, get_ops
from tests.conformance.conftest import BLOCK, mixed
from tests.engine.conftest import Result, run_requests, solo
from tests.engine.randmodel import random_config, random_mtp_tensors, random_tensors

SHAPE = dict(
    hidden=128, layers=4, inter=192, vocab=1088, experts=8, top_k=3, moe_inter=64, mlp_only=(1,)
)
_models: dict[str, Any] = {}
_solo: dict[tuple, Result] = {}


def moe_model(backend: str) -> Any:
    if backend not in _models:
        try:
            cfg = random_config(**SHAPE)
            tensors = {**random_tensors(cfg, 11), **random_mtp_tensors(cfg, 12)}
            _models[backend] = build(cfg, tensors, get_ops(backend))
        except (InputError, EngineFailure, ImportError) as exc:
            _models[backend] = exc
    got = _models[backend]
    if isinstance(got, Exception):
        pytest.skip(f"backend {backend}: {got}")
    return got


@pytest.fixture(params=BACKENDS, scope="module")
def model(request: pytest.FixtureRequest) -> Any:
    return moe_model(request.param)


def assert_solo(model: Any, got: dict[str, Result], reqs: list[Request], kv: str = "bf16") -> None:
    for r in reqs:
        key = (model.ops.name, kv, repr(replace(r, draft=False)))
        if key not in _solo:
            _solo[key] = solo(model, replace(r, draft=False), context=320, kv=kv)
        assert got[r.id] == _solo[key], f"{model.ops.name}: {r.id} differs from solo"


def test_the_model_is_sparse_with_an_moe_mtp_layer(model: Any) -> None:
    assert [layer.moe is not None for layer in model.layers] == [True, False, True, True]
    assert MtpDrafter(model).w.layer.moe is not None


@pytest.mark.parametrize("parallel", [4, 8])
def test_concurrent_equals_solo(model: Any, parallel: int) -> None:
    reqs = mixed()
    assert_solo(model, run_requests(model, reqs, context=320, parallel=parallel), reqs)


def test_prompt_cut_into_steps_equals_solo(model: Any) -> None:
    reqs = mixed(salt=2)
    assert_solo(model, run_requests(model, reqs, context=320, parallel=3, step_rows=16), reqs)


def test_paging_and_fp8_equal_solo(model: Any) -> None:
    reqs = mixed(salt=3)
    assert_solo(model, run_requests(model, reqs, context=320, parallel=4, kv_pages=48), reqs)
    got = run_requests(model, reqs, context=320, parallel=4, kv="fp8")
    assert_solo(model, got, reqs, kv="fp8")


def test_resumed_equals_fresh(model: Any) -> None:
    """A second turn reuses the first turn's cached pages and replies as a fresh run."""
    first, filler = mixed(max_tokens=24, salt=4)[6:8]
    engine = Engine(model, EngineConfig(context=320, parallel=2, kv_pages=40, kv="bf16"))
    done = engine.submit(first)
    engine.run()
    engine.submit(replace(filler, arrival=engine.clock.now() - engine.t0))
    engine.run()
    turn = Request("turn2", first.prompt_ids + done.generated + [5, 6, 7], max_tokens=10)
    assert engine.plan.reusable_rows(turn.prompt_ids) >= 64
    again = engine.submit(turn)
    engine.run()
    assert_solo(model, {"turn2": Result.of(again)}, [turn])
    assert engine.plan.pages_in_use == 0


@pytest.mark.parametrize(
    "name,parallel,kv,k",
    [("mtp", 1, "bf16", 3), ("mtp", 4, "fp8", 2), ("mtp", 8, "bf16", 4), ("block", 4, "bf16", 3)],
)
def test_drafted_equals_plain(model: Any, name: str, parallel: int, kv: str, k: int) -> None:
    """MTP with its sparse layer; the bundled block drafter (dense) over the MoE target."""
    reqs = [replace(r, draft=True) for r in mixed(max_tokens=14, salt=5)]
    drafter = MtpDrafter(model) if name == "mtp" else BlockDrafter(model, str(BLOCK))
    engine = Engine(
        model,
        EngineConfig(context=320, parallel=parallel, kv=kv, draft_tokens=k),
        drafter=drafter,
    )
    for r in reqs:
        engine.submit(r)
    engine.run()
    assert sum(s.drafted for s in engine.finished) > 0
    assert engine.plan.pages_in_use == 0 and engine.plan.unplanned_allocations == 0
    got = {s.req.id: Result.of(s) for s in engine.finished}
    assert_solo(model, got, [replace(r, draft=False) for r in reqs], kv=kv)
