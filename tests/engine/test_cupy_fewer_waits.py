"""The module compiled with ENGINE_FEWER_WAITS (options.fewer_waits: the trees' levels under
32 by warp shuffles, add_rms_norm's values held in registers) against the default module,
bit for bit (marked `gpu`): the norms at row lengths in and past a block's registers and
under a warp, and whole forwards (prompt, decode steps of 1-8 streams, bf16 and fp8 KV,
eager and through graphs), which run every tree: attention's, the norms', the K/V codecs'."""

from __future__ import annotations

import numpy as np
import pytest

from tests.engine.cupy_setup import GPU_ONLY, assert_same_kv, prompt_then_steps

pytestmark = GPU_ONLY


@pytest.fixture(scope="module")
def both():  # type: ignore[no-untyped-def]
    from engine.ops.cupy_ops import CupyOps
    from engine.ops.cupy_options import CupyOptions

    return CupyOps(probe=False), CupyOps(CupyOptions(fewer_waits=1), probe=False)


def test_the_norms_keep_their_bits(both) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(5)
    for cols, m in ((1024, 1), (1024, 5), (3000, 3), (77, 2), (16, 4), (1, 2)):
        x = [rng.standard_normal((m, cols)).astype(np.float32) for _ in "abw"]
        got = []
        for ops in both:
            a, b, w = (ops.asarray(v) for v in (x[0], x[1], x[2][0]))
            s, y = ops.add_rms_norm(a, b, w, 1e-6)
            got.append((s.tobytes(), y.tobytes(), ops.rms_norm(a, w, 1e-6).tobytes()))
        assert got[0] == got[1], (cols, m)


@pytest.mark.parametrize("graphs", [False, True])
@pytest.mark.parametrize("kind", ["bf16", "fp8"])
def test_forwards_keep_their_bits(tmp_path, monkeypatch, kind, graphs) -> None:  # type: ignore[no-untyped-def]
    from engine.model.loader import load_model

    monkeypatch.setenv("ENGINE_SYNTHETIC_DIR", str(tmp_path))
    models = []
    for waits in ("0", "1"):
        monkeypatch.setenv("ENGINE_CUPY_FEWER_WAITS", waits)
        models.append(load_model("synthetic:tiny@5", "cupy"))
        models[-1].ops.graphs = graphs
    assert [m.ops.options.fewer_waits for m in models] == [0, 1]
    kvs = [m.new_kv(40, 16, kind, lanes=8, lane_rows=64) for m in models]
    rng = np.random.default_rng(13)
    lanes = [[4 * i + j for j in range(4)] for i in range(8)]
    steps, starts = prompt_then_steps(rng, lanes, 20)
    for segs in steps:
        want = models[0].forward(segs, kvs[0])
        got = models[1].forward(segs, kvs[1])
        for a, b in zip(want, got, strict=True):
            assert a.logits.tobytes() == b.logits.tobytes()
            assert a.hidden.tobytes() == b.hidden.tobytes()
    assert_same_kv(kvs, models[0].config.num_layers, lanes, starts)
