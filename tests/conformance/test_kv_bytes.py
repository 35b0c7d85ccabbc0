"""The KV codec's bytes are the same on every backend: the same float32 rows stored through
a backend's KV memory read back as the codes engine/kv/codec.py makes on the host."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from engine.kv import codec
from engine.ops.base import KVSegment


@pytest.mark.parametrize("kind", ["bf16", "fp8"])
def test_stored_codes_equal_host_codec(model: Any, kind: str) -> None:
    cfg, ops = model.config, model.ops
    hkv, d = cfg.num_kv_heads, cfg.head_dim
    kv = model.new_kv(8, 16, kind, lanes=2, lane_rows=128)
    rng = np.random.default_rng(5)
    # magnitudes from 1e-30 to 1e4, a zero row and a negative-zero row
    k = rng.standard_normal((40, hkv, d)) * 10.0 ** rng.integers(-30, 5, (40, hkv, 1))
    k = k.astype(np.float32)
    k[3] = 0.0
    k[4] = -0.0
    v = k[::-1].copy()
    q = np.zeros((40, cfg.num_heads, d), np.float32)
    pages = [5, 2, 7]
    seg = KVSegment(lane=1, pages=pages, start=0, count=40)
    kv.open_lane(1, pages, 0)
    kv.store_attend(0, [seg], np.arange(40), ops.asarray(q), ops.asarray(k), ops.asarray(v))
    kc, ke, vc, ve = kv.read_codes(0, pages, 40)
    want_k, want_ke = codec.encode(kind, k)
    want_v, want_ve = codec.encode(kind, v)
    assert kc.tobytes() == want_k.tobytes() and vc.tobytes() == want_v.tobytes()
    if kind == "fp8":
        assert ke.tobytes() == want_ke.tobytes() and ve.tobytes() == want_ve.tobytes()
