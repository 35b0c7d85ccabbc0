"""drafted == plain, bit for bit: every drafter, K 1..8, parallel 1..8, paging, bf16/fp8,
greedy and seeded sampling; the oracle is always accepted; noisy hits every length."""

from __future__ import annotations

import numpy as np
import pytest

from engine.config import EngineConfig
from engine.draft.block import BlockDrafter
from engine.draft.mtp import MtpDrafter
from engine.draft.oracle import NoisyDrafter, OracleDrafter
from engine.lanes.engine import Engine
from engine.lanes.request import Request
from engine.model.qwen3 import build
from engine.ops.numpy_ops import NumpyOps
from tests.engine.randmodel import (
    random_config,
    random_mtp_tensors,
    random_tensors,
    write_random_block_drafter,
)

LENGTHS = [1, 15, 16, 17, 63, 64, 65, 130]


@pytest.fixture(scope="module")
def model():
    cfg = random_config()
    tensors = random_tensors(cfg)
    tensors.update(random_mtp_tensors(cfg))
    return build(cfg, tensors, NumpyOps())


@pytest.fixture(scope="module")
def block_dir(tmp_path_factory, model):
    path = tmp_path_factory.mktemp("block")
    write_random_block_drafter(str(path), model.config)
    return str(path)


def requests(sampled: bool) -> list[Request]:
    rng = np.random.default_rng(11)
    return [
        Request(
            id=f"r{i}",
            prompt_ids=rng.integers(0, 300, n).tolist(),
            max_tokens=14,
            temperature=0.8 if sampled and i % 2 else 0.0,
            seed=100 + i,
            draft=i != 3,  # one request plain inside drafted batches
        )
        for i, n in enumerate(LENGTHS)
    ]


def run(model, drafter=None, sampled=False, **cfg) -> tuple[dict[str, tuple], Engine]:
    """Each request's (generated ids, logit hashes): drafted rows must be bit-equal too."""
    engine = Engine(model, EngineConfig(context=256, **cfg), drafter=drafter)
    for r in requests(sampled):
        engine.submit(r)
    done = engine.run()
    assert engine.plan.pages_in_use == 0
    assert engine.plan.unplanned_allocations == 0
    assert all(s.finish_reason in ("stop", "length") for s in done), [s.error for s in done]
    return {s.req.id: (s.generated, s.logit_hashes) for s in done}, engine


@pytest.fixture(scope="module")
def plain(model):
    refs = {}
    for kv in ("bf16", "fp8"):
        for sampled in (False, True):
            refs[kv, sampled] = run(model, kv=kv, sampled=sampled, serial=True)[0]
    return refs


@pytest.mark.parametrize("name", ["mtp", "block", "noisy"])
@pytest.mark.parametrize(
    "parallel,paging,kv,k,sampled",
    [
        (1, 0, "bf16", 1, False),
        (2, 200, "fp8", 3, True),
        (4, 0, "bf16", 5, True),
        (8, 200, "bf16", 8, False),
        (8, 0, "fp8", 2, False),
    ],
)
def test_drafted_equals_plain(model, block_dir, plain, name, parallel, paging, kv, k, sampled):
    if name == "mtp":
        drafter = MtpDrafter(model)
    elif name == "block":
        drafter = BlockDrafter(model, block_dir)
    else:
        drafter = NoisyDrafter(truth={i: ids for i, (ids, _) in plain[kv, sampled].items()})
    out, engine = run(
        model, drafter, sampled, parallel=parallel, kv_pages=paging, kv=kv, draft_tokens=k
    )
    assert out == plain[kv, sampled]
    assert sum(s.drafted for s in engine.finished) > 0
    assert engine.finished and all(s.drafted == 0 for s in engine.finished if not s.req.draft)


@pytest.mark.parametrize("k", [1, 2, 4, 8])
def test_oracle_is_always_accepted(model, plain, k):
    truth = {i: ids for i, (ids, _) in plain["bf16", False].items()}
    out, engine = run(model, OracleDrafter(truth=truth), parallel=4, draft_tokens=k)
    assert out == plain["bf16", False]
    for s in engine.finished:
        assert s.accepted == s.drafted
        if s.req.draft:  # every round but the last gives K+1 tokens
            assert s.rounds == -(-(len(s.generated) - 1) // (k + 1))


@pytest.mark.parametrize("k", [2, 5])
def test_noisy_exercises_every_accepted_length(model, k):
    reqs = requests(False)
    for r in reqs:
        r.max_tokens = 40
    solo = Engine(model, EngineConfig(context=256, serial=True))
    for r in reqs:
        solo.submit(r)
    truth = {s.req.id: s.generated for s in solo.run()}
    engine = Engine(
        model,
        EngineConfig(context=256, parallel=2, draft_tokens=k),
        drafter=NoisyDrafter(truth=truth),
    )
    for r in reqs:
        engine.submit(r)
    seen: set[int] = set()
    before: dict[int, int] = {}

    def watch(eng, event):
        if event.kind == "round":
            for s in eng.finished + eng.live:
                if s.sid in event.streams and s.req.draft and s.drafted > 0:
                    seen.add(s.accepted - before.get(s.sid, 0))
        for s in eng.finished + eng.live:
            before[s.sid] = s.accepted

    engine.on_event = watch
    assert {s.req.id: s.generated for s in engine.run()} == truth
    assert set(range(k + 1)) <= seen


@pytest.mark.parametrize("cap", [1, 3, 6])
def test_cancel_after_lands_after_its_token_when_drafts_are_accepted(model, plain, cap):
    """A round that accepts drafts past `cancel_after` keeps only the tokens up to it."""
    truth = {i: ids for i, (ids, _) in plain["bf16", False].items()}
    engine = Engine(
        model,
        EngineConfig(context=256, parallel=4, draft_tokens=4),
        drafter=OracleDrafter(truth=truth),
    )
    for r in requests(False):
        r.cancel_after = cap
        engine.submit(r)
    done = engine.run()
    assert {s.req.id: s.generated for s in done} == {i: ids[:cap] for i, ids in truth.items()}
    assert all(s.finish_reason == "cancelled" for s in done if len(truth[s.req.id]) > cap)
    assert engine.plan.pages_in_use == 0
