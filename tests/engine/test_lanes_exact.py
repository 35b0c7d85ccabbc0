"""Exactness on the real model (numpy backend): a stream's tokens, logit margins and
embedding are bit-equal whatever runs beside it, however its prompt is cut into steps,
wherever its KV lives (paging on/off, a reused prefix), for greedy and seeded sampling.

The bundled tiny Qwen3 (bf16 weights) and random Qwen3 shapes from randmodel.py. Arrivals
are in fake seconds: the model is wrapped so that each forward advances a FakeClock."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from engine.lanes.request import Request
from tests.engine.conftest import Result, clocked_engine, ids, random_model, run_requests

LENGTHS = (1, 15, 16, 17, 63, 64, 65, 130)

_solo_cache: dict[tuple, Result] = {}


def solo(model: Any, r: Request, **cfg: Any) -> Result:
    """The request alone on a one-lane engine without paging, default steps (cached)."""
    cfg = {"context": 256, **cfg, "parallel": 1, "kv_pages": 0, "step_rows": 64}
    key = (
        id(model),
        r.kind,
        tuple(r.prompt_ids),
        r.max_tokens,
        r.temperature,
        r.seed,
        tuple(r.stop_ids),
        r.ignore_eos,
        tuple(sorted(cfg.items())),
    )
    if key not in _solo_cache:
        alone = replace(r, arrival=0.0, priority="foreground")
        _solo_cache[key] = run_requests(model, [alone], **cfg)[r.id]
    return _solo_cache[key]


def mixed(
    vocab: int = 1000,
    salt: int = 0,
    temperature: float = 0.0,
    seed: int = 0,
    lengths: tuple[int, ...] = LENGTHS,
    gap: float = 0.004,
) -> list[Request]:
    """Prompts straddling the step (64) and page (16) boundaries, staggered arrivals."""
    return [
        Request(
            f"r{i}",
            ids(n, salt * 100 + i, vocab),
            max_tokens=4 + (i * 3) % 7,
            temperature=temperature,
            seed=seed + i,
            arrival=gap * ((i * 5) % len(lengths)),
            ignore_eos=i % 2 == 0,  # half run their full length, so streams overlap
            priority="background" if i % 3 == 2 else "foreground",
        )
        for i, n in enumerate(lengths)
    ]


def check_equal_to_solo(
    model: Any, reqs: list[Request], cfg_solo: dict | None = None, **cfg: Any
) -> dict[str, Result]:
    cfg.setdefault("context", 256)
    got = run_requests(model, reqs, **cfg)
    solo_cfg = {"context": cfg["context"], "kv": cfg.get("kv", "bf16"), **(cfg_solo or {})}
    for r in reqs:
        ref = solo(model, r, **solo_cfg)
        assert got[r.id] == ref, (r.id, len(r.prompt_ids), got[r.id].ids, ref.ids)
    return got


def max_round_width(model: Any, reqs: list[Request], **cfg: Any) -> int:
    e = clocked_engine(model, context=256, **cfg)
    for r in reqs:
        e.submit(r)
    e.run()
    return max((len(ev.streams) for ev in e.events if ev.kind == "round"), default=0)


# ---- concurrent == solo ------------------------------------------------------------------


@pytest.mark.parametrize("parallel", [1, 2, 4, 8])
def test_concurrent_equals_solo(tiny: Any, parallel: int) -> None:
    reqs = mixed()
    check_equal_to_solo(tiny, reqs, parallel=parallel)
    if parallel > 1:  # the streams did overlap
        assert max_round_width(tiny, reqs, parallel=parallel) >= min(parallel, 4)


@pytest.mark.parametrize("kv", ["bf16", "fp8"])
def test_paging_equals_no_paging(tiny: Any, kv: str) -> None:
    """A pool too small for all lanes at once (streams wait for pages) vs fixed runs."""
    reqs = mixed(salt=1)
    check_equal_to_solo(tiny, reqs, parallel=4, kv=kv, kv_pages=20)


@pytest.mark.parametrize("kv", ["bf16", "fp8", "f32"])
def test_step_size_does_not_change_tokens(tiny: Any, kv: str) -> None:
    reqs = [r for r in mixed(salt=2) if len(r.prompt_ids) in (17, 65, 130)]
    for step_rows in (1, 3, 16, 64, 128):
        check_equal_to_solo(tiny, reqs, parallel=3, kv=kv, step_rows=step_rows)


@pytest.mark.parametrize("kv", ["bf16", "fp8"])
def test_page_size_does_not_change_tokens(tiny: Any, kv: str) -> None:
    reqs = [r for r in mixed(salt=3) if len(r.prompt_ids) in (15, 17, 65)]
    for page_rows in (1, 7, 16, 64):
        check_equal_to_solo(
            tiny, reqs, parallel=2, kv=kv, page_rows=page_rows, kv_pages=300 // page_rows + 1
        )


@pytest.mark.parametrize("kv", ["bf16", "fp8", "f32"])
def test_resumed_equals_fresh(tiny: Any, kv: str) -> None:
    """Turn 2 = turn 1's prompt + its reply + new tokens reuses turn 1's cached pages and
    says what a cold run says."""
    e = clocked_engine(tiny, context=256, parallel=2, kv=kv, kv_pages=40)
    t1 = e.submit(Request("t1", ids(50, 11), max_tokens=12))
    beside = e.submit(Request("beside", ids(30, 12), max_tokens=12))
    e.run()
    prompt2 = t1.req.prompt_ids + t1.generated + ids(20, 13)
    opened = []
    plan_open = e.plan.open

    def spy(*args: Any) -> Any:
        opened.append(plan_open(*args))
        return opened[-1]

    e.plan.open = spy
    before = e.stats["prefill_tokens"]
    t2 = e.submit(Request("t2", prompt2, max_tokens=10, arrival=e.clock.now() - e.t0))
    e.run()
    reused = opened[0].reused_rows
    assert reused == 16 * ((50 + 12 - 1) // 16) and reused > 0
    assert e.stats["prefill_tokens"] - before == len(prompt2) - reused
    assert e.plan.pages_in_use == 0 and e.plan.unplanned_allocations == 0
    cold = solo(tiny, t2.req, kv=kv)
    assert Result.of(t2) == cold
    # an embedding of the whole conversation so far reads the cached pages of both turns
    whole = prompt2 + t2.generated
    emb = e.submit(Request("emb", whole, kind="embed", arrival=e.clock.now() - e.t0))
    e.run()
    assert opened[-1].reused_rows == 16 * ((len(whole) - 1) // 16) > reused
    assert Result.of(emb) == solo(tiny, emb.req, kv=kv)
    assert Result.of(beside) == solo(tiny, beside.req, kv=kv)


# ---- requests ------------------------------------------------------------------------------


@pytest.mark.parametrize("kv", ["bf16", "fp8"])
def test_sampling_with_a_seed_is_exact(tiny: Any, kv: str) -> None:
    reqs = mixed(salt=4, temperature=0.9, seed=7)
    got = check_equal_to_solo(tiny, reqs, parallel=4, kv=kv, step_rows=16)
    other_seed = run_requests(
        tiny, [replace(r, seed=r.seed + 1000) for r in reqs], context=256, parallel=4, kv=kv
    )
    greedy = run_requests(
        tiny, [replace(r, temperature=0.0) for r in reqs], context=256, parallel=4, kv=kv
    )
    differs = sum(got[r.id].ids != other_seed[r.id].ids for r in reqs)
    assert differs >= len(reqs) // 2  # the seed keys the draw, so the test can fail
    assert sum(got[r.id].ids != greedy[r.id].ids for r in reqs) >= len(reqs) // 2


def test_same_seed_same_position_same_draw(tiny: Any) -> None:
    """Two streams with the same prompt and seed draw the same tokens side by side."""
    r = Request("a", ids(20, 5), max_tokens=10, temperature=1.5, seed=3)
    got = run_requests(tiny, [r, replace(r, id="b")], context=256, parallel=2)
    assert got["a"].ids == got["b"].ids


@pytest.mark.parametrize("kv", ["bf16", "fp8"])
def test_embeddings_are_invariant(tiny: Any, kv: str) -> None:
    reqs = mixed(salt=5)
    embeds = [replace(r, id="e" + r.id, kind="embed") for r in reqs[::2]]
    got = check_equal_to_solo(tiny, reqs + embeds, parallel=4, kv=kv, step_rows=16)
    for r in embeds:
        res = got[r.id]
        assert res.embedding is not None and res.ids == () and res.finish_reason == "stop"
        emb = np.frombuffer(res.embedding, np.float32)
        assert emb.shape == (tiny.config.hidden_size,) and np.all(np.isfinite(emb))
        # the final hidden state of the last row: through the head it gives that row's
        # logits, whose top two make the same request's first margin and token
        logits = tiny.ops.to_numpy(tiny.ops.linear(emb[None, :], tiny.lm_head))[0]
        complete = got[r.id[1:]]
        assert int(np.argmax(logits)) == complete.ids[0]
        top2 = np.partition(logits, -2)[-2:]
        assert np.float64(top2[1] - top2[0]).tobytes() == complete.margins[:8]
    assert len({got[r.id].embedding for r in embeds}) == len(embeds)


def test_stop_ids_and_max_tokens_on_the_real_model(tiny: Any) -> None:
    base = Request("s", ids(33, 6), max_tokens=12, ignore_eos=True)
    full = solo(tiny, base)
    stop = full.ids[5]
    cut = full.ids.index(stop) + 1
    got = run_requests(
        tiny,
        [
            replace(base, id="stop", stop_ids=[stop]),
            replace(base, id="short", max_tokens=3),
            *mixed(salt=6),
        ],
        context=256,
        parallel=4,
    )
    assert got["stop"].ids == full.ids[:cut] and got["stop"].finish_reason == "stop"
    assert got["short"].ids == full.ids[:3] and got["short"].finish_reason == "length"
    assert got["stop"].margins == full.margins[: 8 * cut]


# ---- other shapes ----------------------------------------------------------------------------

SHAPES = {
    "mqa-untied": dict(hidden=48, heads=4, kv_heads=1, head_dim=16, inter=80, tied=False),
    "gqa-4": dict(hidden=64, heads=8, kv_heads=2, head_dim=24, inter=96, layers=3),
    "mha": dict(hidden=32, heads=2, kv_heads=2, head_dim=32, inter=64, layers=1),
}
_models: dict[str, Any] = {}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_random_shapes_concurrent_equals_solo(shape: str) -> None:
    if shape not in _models:
        _models[shape] = random_model(seed=len(shape), **SHAPES[shape])
    model = _models[shape]
    vocab = model.config.vocab_size - 1
    reqs = [replace(r, ignore_eos=True) for r in mixed(vocab=vocab, salt=7)]
    check_equal_to_solo(model, reqs, parallel=4, step_rows=16, kv="bf16")
    check_equal_to_solo(model, reqs, parallel=8, kv="fp8", kv_pages=60)


# ---- the comparison can fail -----------------------------------------------------------------


def test_a_batch_dependent_op_is_caught(tiny: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Plant a linear whose bits depend on how many rows share the call: concurrent runs
    must then differ from solo ones (margins at least), or the tests above prove nothing."""
    ops = tiny.ops
    linear = type(ops).linear

    def batch_dependent(self: Any, x: np.ndarray, w: np.ndarray) -> np.ndarray:
        out = linear(self, x, w)
        return out * np.float32(1 + 2**-20) if x.shape[0] > 8 else out

    reqs = mixed(salt=8)
    refs = {r.id: solo(tiny, r) for r in reqs}
    monkeypatch.setattr(type(ops), "linear", batch_dependent)
    got = run_requests(tiny, reqs, context=256, parallel=4)
    assert any(got[r.id] != refs[r.id] for r in reqs)


@pytest.mark.parametrize("kv_pages", [0, 40])
def test_a_forward_failing_halfway_leaves_no_trace(tiny: Any, kv_pages: int) -> None:
    """A forward that fails after some layers wrote K/V (a partial step) ends its streams;
    the others, and the same request run again on the same pages, say what they say alone."""
    e = clocked_engine(tiny, context=256, parallel=2, kv_pages=kv_pages, step_rows=16)
    store = e.kv
    write = store.store_attend
    calls = {"n": 0}

    def failing_write(layer: int, segments: list, *rest: Any) -> Any:
        if any(s.start == 32 and s.count == 16 for s in segments):  # the victim's third step
            calls["n"] += 1
            if calls["n"] == 3:  # layer 2 of 4: layers 0 and 1 wrote their rows
                raise RuntimeError("device lost")
        return write(layer, segments, *rest)

    store.store_attend = failing_write
    victim = e.submit(Request("victim", ids(70, 21), max_tokens=6))
    other = e.submit(Request("other", ids(9, 22), max_tokens=12))
    e.run()
    assert victim.finish_reason == "error" and "device lost" in victim.error
    assert Result.of(other) == solo(tiny, other.req)
    store.store_attend = write
    again = e.submit(replace(victim.req, id="again", arrival=e.clock.now() - e.t0))
    e.run()
    assert Result.of(again) == solo(tiny, victim.req)
    assert e.plan.pages_in_use == 0
