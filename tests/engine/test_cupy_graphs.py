"""Steps through CUDA graphs on the cupy backend (marked `gpu`; skipped where cupy cannot run):
prompt, decode and drafter steps replayed from captured graphs give the eager forward's bits
(logits, hidden rows, taps, KV bytes), and the lanes engine replies the same with graphs on
as with every step eager."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tests.engine.cupy_setup import GPU_ONLY

pytestmark = GPU_ONLY


@pytest.mark.parametrize(
    "spec,early", [("synthetic:tiny@5", 0), ("synthetic:tiny@5", 1), ("synthetic:tiny-moe@5", 0)]
)
def test_graph_decode_equals_eager(tmp_path, monkeypatch, spec, early) -> None:  # type: ignore[no-untyped-def]
    """Prompt steps and decode steps replayed from CUDA graphs give the eager forward's
    logits, hidden rows and KV bytes, for 1 and 3 streams, with the padded rows kept out of
    the streams' pages; the MoE model's steps go through graphs too (routing on the device).
    With `early` each split attention launch copies its old keys before it waits for the
    K/V write before it (in the graph, by programmatic dependent launch)."""
    from engine.model.loader import load_model
    from engine.model.qwen3 import Segment, graph_step

    monkeypatch.setenv("ENGINE_SYNTHETIC_DIR", str(tmp_path))
    model = load_model(spec, "cupy")
    # a 100-row prompt step is a graph of 128 rows: above the default's 64
    model.ops.options = dataclasses.replace(
        model.ops.options,
        graph_rows=128,
        attend_early=early,
    )

    def eager_and_graph(segs: list, kvs: list) -> tuple[list, list]:
        model.ops.graphs = False  # model.forward eager
        eager = model.forward(segs, kvs[0])
        model.ops.graphs = True
        graph = graph_step(model, segs, kvs[1])
        assert graph is not None, "the step did not go through a graph"
        return eager, graph

    rng = np.random.default_rng(3)
    for kind in ("bf16", "fp8"):
        kvs = [model.new_kv(24, 16, kind, lanes=3, lane_rows=128) for _ in range(2)]
        lanes = [[8 * i + j for j in range(8)] for i in range(3)]
        # prompt steps: graphs of 8, 24 and 128 rows (13 tiles round up to 16), logits of
        # one row, of two rows not at the end, of the last row
        for i, (n, want) in enumerate(((5, [4]), (17, [3, 16]), (100, [99]))):
            seg = Segment(rng.integers(0, 512, n), 0, lanes[i], np.asarray(want), lane=i)
            (eager,), (graph,) = eager_and_graph([seg], kvs)
            assert eager.logits.tobytes() == graph.logits.tobytes()
            assert eager.hidden.tobytes() == graph.hidden.tobytes()
        starts = [5, 17, 100]
        for step in range(4):
            live = [0] if step == 0 else [0, 1, 2]
            segs = [
                Segment(rng.integers(0, 512, 1), starts[i], lanes[i], np.asarray([0]), lane=i)
                for i in live
            ]
            eager, graph = eager_and_graph(segs, kvs)
            for a, b in zip(eager, graph, strict=True):
                assert a.logits.tobytes() == b.logits.tobytes()
                assert a.hidden.tobytes() == b.hidden.tobytes()
            for i in live:
                starts[i] += 1
        for layer in (0, 1):
            for i in range(3):
                a = kvs[0].read_codes(layer, lanes[i], starts[i])
                b = kvs[1].read_codes(layer, lanes[i], starts[i])
                assert all(
                    x is None or x.tobytes() == y.tobytes() for x, y in zip(a, b, strict=True)
                )


def test_graph_with_taps_equals_eager(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A drafter's steps (taps of the last layer and of layer 0) through a graph give the
    eager forward's logits, hidden rows and tapped rows: prompt steps (logits of the last
    row, taps of all; two streams in one step, one asking no logits) and verify rounds of 3
    rows a stream (logits of all). Planted: the tapped rows taken at the logit rows only,
    red."""
    from engine.model.loader import load_model
    from engine.model.qwen3 import Segment, graph_step

    monkeypatch.setenv("ENGINE_SYNTHETIC_DIR", str(tmp_path))
    model = load_model("synthetic:tiny@5", "cupy")
    taps = (0, model.config.num_layers - 1)
    rng = np.random.default_rng(4)
    kvs = [model.new_kv(24, 16, "bf16", lanes=3, lane_rows=128) for _ in range(2)]
    lanes = [[8 * i + j for j in range(8)] for i in range(3)]

    def check(segs: list) -> None:
        model.ops.graphs = False
        eager = model.forward(segs, kvs[0], taps)
        model.ops.graphs = True
        graph = graph_step(model, segs, kvs[1], taps)
        assert graph is not None, "the step did not go through a graph"
        for a, b in zip(eager, graph, strict=True):
            if a.logits is None:
                assert b.logits is None
            else:
                assert np.asarray(a.logits).tobytes() == np.asarray(b.logits).tobytes()
            assert a.hidden.tobytes() == b.hidden.tobytes()
            assert a.taps.keys() == b.taps.keys() == set(taps)
            for li in taps:
                assert a.taps[li].tobytes() == b.taps[li].tobytes()

    check([Segment(rng.integers(0, 512, 5), 0, lanes[0], np.asarray([4]), lane=0)])
    check(
        [
            Segment(rng.integers(0, 512, 17), 0, lanes[1], np.asarray([], np.int64), lane=1),
            Segment(rng.integers(0, 512, 9), 0, lanes[2], np.asarray([8]), lane=2),
        ]
    )
    starts = [5, 17, 9]
    segs = [
        Segment(rng.integers(0, 512, 3), starts[i], lanes[i], np.arange(3), lane=i)
        for i in range(3)
    ]
    check(segs)


def test_engine_with_graph_decode_equals_eager(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The lanes engine with decode steps through the CUDA graph (the default) replies as
    with every step eager (ENGINE_CUPY_GRAPHS=0), at 1 and 4 lanes, bf16 and fp8, greedy
    and sampled."""
    from engine.model import qwen3
    from engine.model.loader import load_model
    from tests.conformance.conftest import TINY, mixed
    from tests.engine.conftest import run_requests

    model = load_model(TINY, "cupy")
    reqs = mixed(max_tokens=8, salt=9)
    runs = [(p, kv) for p in (1, 4) for kv in ("bf16", "fp8")]
    model.ops.graphs = False
    eager = {
        run: run_requests(model, reqs, context=320, parallel=run[0], kv=run[1]) for run in runs
    }
    model.ops.graphs = True
    hits = []
    step = qwen3.graph_step

    def counted(*args, **kw):  # type: ignore[no-untyped-def]
        out = step(*args, **kw)
        if out is not None:
            hits.append(len(out))
        return out

    monkeypatch.setattr(qwen3, "graph_step", counted)
    for run in runs:
        got = run_requests(model, reqs, context=320, parallel=run[0], kv=run[1])
        assert got == eager[run], f"parallel {run[0]} kv {run[1]}: graph != eager"
    assert hits and max(hits) > 1
