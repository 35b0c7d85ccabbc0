"""The mlx backend end to end: a random Qwen3 gives the same token ids and margins with 1..8
lanes, cut prompts, paging, lazy graphs and staggered arrivals as served serially, bit for
bit; and how far its logits are from numpy's (a report, not a bound). The per-op checks are
tests/engine/test_mlx_backend.py."""

from __future__ import annotations

import numpy as np
import pytest

mx = pytest.importorskip("mlx.core")

from engine.config import EngineConfig  # noqa: E402
from engine.lanes.engine import Engine  # noqa: E402
from engine.lanes.request import Request  # noqa: E402
from engine.model.qwen3 import build  # noqa: E402
from engine.ops.mlx_ops import MlxOps  # noqa: E402
from engine.ops.numpy_ops import NumpyOps  # noqa: E402
from tests.engine.randmodel import random_config, random_tensors  # noqa: E402

PROMPT_LENS = (5, 70, 13, 1, 131, 33, 64, 9, 65, 2)


def requests(vocab: int, seed: int = 5, max_tokens: int = 10) -> list[Request]:
    rng = np.random.default_rng(seed)
    shared = rng.integers(0, vocab - 1, 40).tolist()
    out = []
    for i, n in enumerate(PROMPT_LENS):
        ids = rng.integers(0, vocab - 1, n).tolist()
        if i % 3 == 2:  # a few prompts share a 32+ token prefix: paged runs reuse its pages
            ids = shared + ids
        out.append(
            Request(id=f"r{i}", prompt_ids=ids, max_tokens=max_tokens, ignore_eos=True, arrival=0.0)
        )
    return out


def outcome(streams) -> list[tuple[list[int], list[float]]]:
    """Token ids, and each sampled row's top-1 minus top-2 logit: the margins catch a logit
    whose bits moved even where the argmax did not."""
    assert all(s.error is None for s in streams), [s.error for s in streams]
    return [(list(s.generated), list(s.margins)) for s in streams]


def serve(model, reqs: list[Request], **kw) -> list[tuple[list[int], list[float]]]:
    engine = Engine(model, EngineConfig(context=256, flags={}, **kw))
    streams = [engine.submit(r) for r in reqs]
    engine.run()
    return outcome(streams)


@pytest.fixture(scope="module")
def small_model():
    cfg = random_config(hidden=64, layers=2, heads=4, kv_heads=2, head_dim=32, inter=96, vocab=320)
    tensors = random_tensors(cfg, seed=3)
    return cfg, tensors, build(cfg, tensors, MlxOps())


@pytest.fixture(scope="module")
def serial_outcome(small_model):
    cfg, _, model = small_model
    return serve(model, requests(cfg.vocab_size), serial=True)


@pytest.mark.parametrize("parallel", [1, 2, 4, 8])
@pytest.mark.parametrize("step_rows,kv_pages", [(64, 0), (16, 0), (7, 48), (64, 40)])
def test_engine_parallel_equals_serial(small_model, serial_outcome, parallel, step_rows, kv_pages):
    cfg, _, model = small_model
    got = serve(
        model, requests(cfg.vocab_size), parallel=parallel, step_rows=step_rows, kv_pages=kv_pages
    )
    assert got == serial_outcome


def test_engine_lazy_graphs_same_bits(small_model, serial_outcome):
    """Ops that leave their graphs lazy until the model reads numpy give the same bits."""
    cfg, tensors, _ = small_model
    lazy = build(cfg, tensors, MlxOps(eval_ops=False))
    assert serve(lazy, requests(cfg.vocab_size), serial=True) == serial_outcome
    assert serve(lazy, requests(cfg.vocab_size), parallel=4, step_rows=16) == serial_outcome


def test_engine_staggered_arrivals(small_model, serial_outcome):
    """Requests arriving while others decode join rounds at different positions."""
    from engine.lanes.clock import FakeClock

    cfg, _, model = small_model
    reqs = requests(cfg.vocab_size)
    for i, r in enumerate(reqs):
        r.arrival = 0.01 * i
    clock = FakeClock()
    engine = Engine(
        model,
        EngineConfig(parallel=4, context=256, step_rows=16, flags={}),
        clock=clock,
    )
    streams = [engine.submit(r) for r in reqs]
    while engine.step():
        clock.advance(0.004)
    assert outcome(streams) == serial_outcome


def test_mlx_vs_numpy_report(small_model, serial_outcome, capsys) -> None:
    """Different kernels give different bits, so no equality across backends: report how
    often greedy ids agree and the largest logit difference (and fail only if they are
    not even close, which would be a wrong op rather than rounding)."""
    cfg, tensors, model = small_model
    np_model = build(cfg, tensors, NumpyOps())
    mlx_ids = [ids for ids, _ in serial_outcome]
    np_ids = [ids for ids, _ in serve(np_model, requests(cfg.vocab_size), serial=True)]
    agree = sum(
        a == b for x, y in zip(mlx_ids, np_ids, strict=True) for a, b in zip(x, y, strict=True)
    )
    total = sum(len(x) for x in mlx_ids)
    # logits of the same full sequences, one forward each
    max_diff = 0.0
    for ids in (r.prompt_ids + g for r, g in zip(requests(cfg.vocab_size), mlx_ids, strict=True)):
        logits = []
        for m in (model, np_model):
            from engine.model.qwen3 import Segment

            kv = m.new_kv(-(-len(ids) // 16), 16, "bf16")
            seg = Segment(np.asarray(ids), 0, list(range(-(-len(ids) // 16))), np.arange(len(ids)))
            logits.append(m.forward([seg], kv)[0].logits)
        max_diff = max(max_diff, float(np.abs(logits[0] - logits[1]).max()))
    with capsys.disabled():
        print(
            f"\nmlx vs numpy greedy ids: {agree}/{total} agree; max |logit diff| over "
            f"{len(mlx_ids)} sequences: {max_diff:.3g}"
        )
    assert max_diff < 1e-2
