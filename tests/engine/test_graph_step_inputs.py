"""qwen3.graph_step's host side on a backend that records what it is handed: the step's
inputs and the outputs it hands back per segment equal the segment-by-segment forms they
replaced (`reference` below), for random steps of 1-8 segments, prompt and decode rows,
any logits rows, taps or none, row tiles 1 and 8. On a GPU the same inputs feed the graph,
so this guards the bits there too (tests/engine/test_cupy_graphs.py runs the graph)."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest

from engine.model.qwen3 import Segment, build, graph_step
from engine.ops.numpy_ops import NumpyOps
from engine.ops.paged_rows import place_rows
from tests.engine.randmodel import random_config, random_tensors

VOCAB = 50
CFG = random_config(layers=1, vocab=VOCAB)
MODEL = build(CFG, random_tensors(CFG, 0), NumpyOps())


class Recording:
    """A backend with graphs that runs none: records the step's inputs; its outputs' rows
    say which step row they are (logits row i holds need[i] + 1000 * i)."""

    name, key_block = "recording", 1

    def __init__(self, tile: int) -> None:
        self.row_tile, self.graph_rows = tile, 64
        self.inputs: dict[str, np.ndarray] = {}

    def moe_in_graph(self, moe: Any) -> bool:
        return True

    def run_graph(self, owner: Any, key: Any, inputs: Any, body: Any, take: Any) -> tuple:
        self.inputs = {k: v.copy() for k, v in inputs.items()}
        takes = take if isinstance(take, tuple) else (take,)
        rows = len(inputs["ids"])
        n = len(takes[0])
        lg = np.asarray(inputs["need"][:n] + 1000 * np.arange(n), dtype=np.float32)[:, None]
        hid = np.arange(rows if len(takes) > 1 else n, dtype=np.float32)[:, None] * 2
        tapped = [np.arange(rows, dtype=np.float32)[:, None] * 3 for _ in takes[2:]]
        return (lg.repeat(3, axis=1), hid, *tapped)


class Paged:
    page_rows, lane_pages, scratch = 4, 8, 99

    def fixed_rows(self, segments: list[Any], rows: int) -> dict[str, np.ndarray] | None:
        return place_rows(segments, rows, self.page_rows, self.lane_pages, self.scratch)


def reference(model: Any, segments: list[Segment], rows: int, tile: int):  # type: ignore[no-untyped-def]
    """The inputs row by row in plain Python: the segments' tokens at their positions, then
    padding (token 0 at position 0); each logits row's step row; each segment's bounds in
    those."""
    ids, pos, need, bounds = [], [], [], [0]
    for s in segments:
        first = len(ids)
        for j, tok in enumerate(s.tokens.tolist()):
            ids.append(tok)
            pos.append(s.start + j)
        need += [first + j for j in s.logit_rows.tolist()]
        bounds.append(len(need))
    ids += [0] * (rows - len(ids))
    pos += [0] * (rows - len(pos))
    padded = need + [0] * (-(-max(1, len(need)) // tile) * tile - len(need))
    inputs = {
        "ids": np.array(ids, dtype=np.int64),
        "cos": model.cos[np.array(pos)],
        "sin": model.sin[np.array(pos)],
        "need": np.array(padded, dtype=np.int64),
    }
    return inputs, np.array(need, dtype=np.int64), bounds


@pytest.mark.parametrize("seed", range(60))
def test_graph_step_inputs_and_outputs_equal_the_segment_loop(seed: int) -> None:
    rng = np.random.default_rng(seed)
    model = copy.copy(MODEL)
    tile = 8 if seed % 3 == 0 else 1
    model.ops = Recording(tile)
    taps = (0,) if seed % 4 == 0 else ()
    segments = []
    for lane in range(int(rng.integers(1, 9))):
        n = int(rng.integers(1, 6)) if seed % 2 else 1
        start = int(rng.integers(0, 32 - n))
        want = rng.permutation(n)[: int(rng.integers(0 if seed % 5 else 1, n + 1))]
        pages = [lane * 8 + i for i in range(8)]
        tokens = rng.integers(0, VOCAB, n).astype(np.int64)
        segments.append(Segment(tokens, start, pages, np.sort(want).astype(np.int64), lane))
    outs = graph_step(model, segments, Paged(), taps)
    assert outs is not None
    rows = len(model.ops.inputs["ids"])
    inputs, need_at, bounds = reference(model, segments, rows, tile)
    for name, a in inputs.items():
        got = model.ops.inputs[name]
        assert got.dtype == a.dtype and np.array_equal(got, a), name
    a = 0
    for s, out, lo, hi in zip(segments, outs, bounds[:-1], bounds[1:], strict=True):
        if hi == lo:
            assert out.logits is None
        else:
            want_lg = need_at[lo:hi] + 1000 * np.arange(lo, hi)
            assert np.array_equal(out.logits[:, 0], want_lg.astype(np.float32))
        want_hid = (need_at[lo:hi] if taps else np.arange(lo, hi)) * 2
        assert np.array_equal(out.hidden[:, 0], want_hid.astype(np.float32))
        for t in out.taps.values():
            assert np.array_equal(t[:, 0], 3 * np.arange(a, a + len(s.tokens), dtype=np.float32))
        assert out.start == s.start and sorted(out.taps) == list(taps)
        a += len(s.tokens)
