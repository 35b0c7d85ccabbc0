"""drafted == plain on the bundled trained fixture, where the MTP head and the block
drafter are accepted for a real share of tokens, so the accept path is exercised too."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.config import EngineConfig
from engine.draft.block import BlockDrafter
from engine.draft.mtp import MtpDrafter
from engine.lanes.engine import Engine
from engine.lanes.request import Request
from engine.model.loader import load_model
from engine.model.tokenizer import Tokenizer

MODELS = Path(__file__).parents[2] / "fixtures" / "models"
PROMPTS = [
    "Return the",
    "If the file does not exist,",
    "This function is called when",
    "Raise a ValueError if the",
    "The default value of the",
    "Create a new",
    "Return a list of the",
    "The name of the module",
]


@pytest.fixture(scope="module")
def model():
    return load_model(MODELS / "tiny-qwen3")


def requests(sampled: bool) -> list[Request]:
    tok = Tokenizer(MODELS / "tiny-qwen3")
    return [
        Request(
            id=str(i),
            prompt_ids=tok.encode(p),
            max_tokens=40,
            temperature=0.6 if sampled and i % 2 else 0.0,
            seed=i,
        )
        for i, p in enumerate(PROMPTS)
    ]


def run(model, drafter=None, sampled=False, **cfg):
    engine = Engine(model, EngineConfig(context=128, **cfg), drafter=drafter)
    for r in requests(sampled):
        engine.submit(r)
    done = engine.run()
    assert engine.plan.pages_in_use == 0 and engine.plan.unplanned_allocations == 0
    return {s.req.id: (s.generated, s.logit_hashes) for s in done}, done  # bit-equal rows too


@pytest.mark.parametrize("name", ["mtp", "block"])
@pytest.mark.parametrize(
    "parallel,kv,paging,k,sampled",
    [(1, "bf16", 0, 4, False), (8, "fp8", 64, 7, True), (4, "bf16", 64, 2, True)],
)
def test_trained_drafters_are_accepted_and_exact(model, name, parallel, kv, paging, k, sampled):
    plain, _ = run(model, kv=kv, sampled=sampled, serial=True)
    drafter = (
        MtpDrafter(model) if name == "mtp" else BlockDrafter(model, MODELS / "tiny-qwen3-block")
    )
    out, done = run(
        model, drafter, sampled, parallel=parallel, kv=kv, kv_pages=paging, draft_tokens=k
    )
    assert out == plain
    drafted = sum(s.drafted for s in done)
    accepted = sum(s.accepted for s in done)
    assert accepted > 0.05 * drafted, (accepted, drafted)  # the accept path ran
