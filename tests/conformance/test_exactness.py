"""concurrent == solo, fp8, prompt cuts, paging, resumed == fresh, drafted == plain: on each
backend, against that backend's own solo replies."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from engine.config import EngineConfig
from engine.draft.block import BlockDrafter
from engine.draft.mtp import MtpDrafter
from engine.lanes.engine import Engine
from engine.lanes.request import Request
from tests.conformance.conftest import BLOCK, mixed
from tests.engine.conftest import Result, run_requests, solo

_solo: dict[tuple, Result] = {}


def solo_of(model: Any, req: Request, kv: str = "bf16") -> Result:
    key = (model.ops.name, kv, repr(replace(req, draft=False)))
    if key not in _solo:
        _solo[key] = solo(model, req, context=320, kv=kv)
    return _solo[key]


def assert_solo(model: Any, got: dict[str, Result], reqs: list[Request], kv: str = "bf16") -> None:
    for r in reqs:
        assert got[r.id] == solo_of(model, r, kv), f"{model.ops.name}: {r.id} differs from solo"


@pytest.mark.parametrize("parallel", [2, 4, 8])
def test_concurrent_equals_solo(model: Any, parallel: int) -> None:
    reqs = mixed()
    assert_solo(model, run_requests(model, reqs, context=320, parallel=parallel), reqs)


@pytest.mark.parametrize("parallel", [1, 4])
def test_fp8_concurrent_equals_solo(model: Any, parallel: int) -> None:
    reqs = mixed(salt=1)
    got = run_requests(model, reqs, context=320, parallel=parallel, kv="fp8")
    assert_solo(model, got, reqs, kv="fp8")


def test_prompt_cut_into_steps_equals_solo(model: Any) -> None:
    reqs = mixed(salt=2)
    got = run_requests(model, reqs, context=320, parallel=3, step_rows=16)
    assert_solo(model, got, reqs)


def test_paging_equals_no_paging(model: Any) -> None:
    reqs = mixed(salt=3)
    got = run_requests(model, reqs, context=320, parallel=4, kv_pages=48)
    assert_solo(model, got, reqs)


@pytest.mark.parametrize("kv", ["bf16", "fp8"])
def test_resumed_equals_fresh(model: Any, kv: str) -> None:
    """A second turn that extends a finished stream reuses its cached pages, and replies
    as the same prompt run fresh on an engine without paging. A filler runs between the
    turns on the same lane, so nothing of the first turn is left in the lane's memory."""
    first, filler = mixed(max_tokens=24, salt=4)[6:8]
    engine = Engine(model, EngineConfig(context=320, parallel=2, kv_pages=40, kv=kv))
    done = engine.submit(first)
    engine.run()
    engine.submit(replace(filler, arrival=engine.clock.now() - engine.t0))
    engine.run()
    turn = Request("turn2", first.prompt_ids + done.generated + [5, 6, 7], max_tokens=10)
    assert engine.plan.reusable_rows(turn.prompt_ids) >= 64
    again = engine.submit(turn)
    engine.run()
    assert Result.of(again) == solo_of(model, turn, kv)
    assert engine.plan.pages_in_use == 0


@pytest.mark.parametrize("name", ["mtp", "block"])
@pytest.mark.parametrize("parallel,kv,k", [(1, "bf16", 3), (4, "fp8", 2), (8, "bf16", 4)])
def test_drafted_equals_plain(model: Any, name: str, parallel: int, kv: str, k: int) -> None:
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
    plain = [replace(r, draft=False) for r in reqs]
    assert_solo(model, got, plain, kv=kv)
