"""The tile attention kernel (cupy_attend_tile.cu: a block per tile of rows and KV head, each
chunk of keys staged once for all its pairs) against the one-block-per-pair and split
kernels, bit for bit (marked `gpu`): prompt runs of several streams, rows of one stream
beside rows of others in a tile, page lists shared or copied per row, shuffled row orders,
a row alone."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tests.engine.cupy_setup import GPU_ONLY

pytestmark = GPU_ONLY


@pytest.fixture(scope="module")
def ops():  # type: ignore[no-untyped-def]
    from engine.ops.cupy_ops import CupyOps

    return CupyOps()


def _codes(rng: np.random.Generator, kind: str, shape: tuple[int, ...]):  # type: ignore[no-untyped-def]
    """Random K or V codes of `kind` (finite values) and, for fp8, a power-of-two exponent a
    key row."""
    import cupy as cp

    if kind == "f32":
        return cp.asarray(rng.standard_normal(shape).astype(np.float32)), None
    if kind == "bf16":  # sign, exponent 120..134, any mantissa
        bits = (
            (rng.integers(0, 2, shape) << 15)
            | (rng.integers(120, 135, shape) << 7)
            | rng.integers(0, 128, shape)
        )
        return cp.asarray(bits.astype(np.uint16)), None
    bits = (rng.integers(0, 2, shape) << 7) | (rng.integers(0, 15, shape) << 3)
    bits |= rng.integers(0, 8, shape)
    exps = rng.integers(-3, 4, shape[:2]).astype(np.int8)
    return cp.asarray(bits.astype(np.uint8)), cp.asarray(exps)


def _rows(rng: np.random.Generator, pages: int, page_rows: int, shared: bool):  # type: ignore[no-untyped-def]
    """A launch's rows over 3 streams: stream 1's first 8 pages are stream 0's (a shared
    prefix, as the prefix cache makes), the rest each stream's own. A prompt run of
    consecutive positions per stream (crossing chunk bounds; stream 0's past 512 keys, so a
    group takes a second chunk at D 128), then single rows at any position (tiles where a row
    joins the reference's staging for the shared chunks and runs alone for the others). Page
    lists flat, one per stream (`shared`, as an eager step has them) or one copy per row (as
    a graph step places them)."""
    per = pages // 3
    lists = [rng.permutation(np.arange(s * per, (s + 1) * per)).astype(np.int32) for s in range(3)]
    lists[1][:8] = lists[0][:8]
    rows = []  # (stream, last position)
    for s, (start, count) in enumerate(((470, 70), (100, 45), (250, 9))):
        rows += [(s, start + i) for i in range(count)]
    rows += [(int(rng.integers(0, 3)), int(rng.integers(0, per * page_rows))) for _ in range(9)]
    if shared:
        ptab = np.concatenate(lists)
        poff = np.array([s * per for s, _ in rows], dtype=np.int32)
    else:
        ptab = np.concatenate([lists[s] for s, _ in rows])
        poff = np.arange(len(rows), dtype=np.int32) * per
    last = np.array([p for _, p in rows], dtype=np.int32)
    return ptab, poff, last


def _attend(  # type: ignore[no-untyped-def]
    ops,
    monkeypatch,
    tile: int,
    split: int,
    *args,
    ts: int = 0,
):
    """ops.attend(kind, q, kc, vc, ke, ve, meta) = args under these options: its output's
    bytes and its bf16 twin's."""
    opts = dataclasses.replace(
        ops.options,
        attend_tile=tile,
        attend_split=split,
        attend_thread_scores=ts,
    )
    monkeypatch.setattr(ops, "options", opts)
    out = ops.attend(*args)
    return out.tobytes(), ops._bf16[1][: len(out)].tobytes()


@pytest.mark.parametrize("kind", ["f32", "bf16", "fp8"])
@pytest.mark.parametrize("shared", [True, False])
@pytest.mark.parametrize("ts", [0, 1])
def test_tile_attention_equals_a_block_per_pair(ops, monkeypatch, kind, shared, ts) -> None:  # type: ignore[no-untyped-def]
    """Tile kernel == one block per pair == split, for every row, at head dims 32-128 and 1,
    2, 3, 8 and 12 q heads a KV head (more pairs a tile than warps), q at two scales (the
    larger drives some weights below float's range); and a row's bits stay when the rows are
    shuffled (other tile neighbours) or when it is alone. ts: the tile kernel's scores a key
    a thread (attend_thread_scores)."""
    import cupy as cp

    from engine.ops.cupy_attend_plan import choose

    rng = np.random.default_rng(31)
    cases = ((128, 16, 8, 1.0), (128, 16, 8, 40.0), (64, 8, 4, 1.0), (128, 8, 8, 1.0))
    cases += ((32, 8, 1, 1.0), (64, 12, 1, 1.0), (128, 6, 2, 1.0))
    for d, hq, hkv, scale in cases:
        pages, page_rows = 3 * 48, 16
        shape = (pages * page_rows, hkv, d)
        (kc, ke), (vc, ve) = _codes(rng, kind, shape), _codes(rng, kind, shape)
        ptab, poff, last = _rows(rng, pages, page_rows, shared)
        n = len(last)
        q = cp.asarray(scale * rng.standard_normal((n, hq, d)).astype(np.float32))
        meta = (cp.asarray(ptab), cp.asarray(poff), cp.asarray(last), page_rows)
        args = (kind, q, kc, vc, ke, ve, meta)
        tiled = _attend(ops, monkeypatch, 1, 0, *args, ts=ts)
        opts = dataclasses.replace(ops.options, attend_tile=1, attend_thread_scores=ts)
        form = choose(n, hq, hkv, d, kind, opts, ops.shared_limit)
        assert form.name == "tile", form  # the tiled launch above ran the tile kernel
        assert form.kernel == ("_tile_ts" if ts else "_tile"), form
        assert tiled == _attend(ops, monkeypatch, 0, 0, *args), (d, hq, hkv)
        assert tiled == _attend(ops, monkeypatch, 0, 10**6, *args), (d, hq, hkv)
        out = np.frombuffer(tiled[0], dtype=np.float32).reshape(n, hq, d)
        order = rng.permutation(n)
        meta2 = (meta[0], cp.asarray(poff[order]), cp.asarray(last[order]), page_rows)
        shuffled = _attend(ops, monkeypatch, 1, 0, kind, q[order], kc, vc, ke, ve, meta2, ts=ts)
        got = np.frombuffer(shuffled[0], dtype=np.float32).reshape(n, hq, d)
        assert got.tobytes() == out[order].tobytes(), (d, hq, hkv)
        for r in (0, 69, 70, n - 1):
            meta1 = (meta[0], cp.asarray(poff[r : r + 1]), cp.asarray(last[r : r + 1]), page_rows)
            alone = _attend(
                ops, monkeypatch, 1, 0, kind, q[r : r + 1], kc, vc, ke, ve, meta1, ts=ts
            )
            assert alone[0] == out[r].tobytes(), (d, hq, hkv, r)


def test_the_device_gives_every_form_its_shared_memory(ops) -> None:  # type: ignore[no-untyped-def]
    """The device's limit is read (the runtime's properties agree where CuPy lists them), and
    every form a launch can take fits it (the tile at 16 pairs included)."""
    import cupy as cp

    from engine.ops.cupy_attend_plan import choose

    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    assert ops.shared_limit == props.get("sharedMemPerBlockOptin", ops.shared_limit) > 48 << 10

    for kind in ("f32", "bf16", "fp8"):
        for n, hq, hkv, d in ((512, 16, 8, 128), (4, 16, 8, 128), (300, 32, 4, 256)):
            assert choose(n, hq, hkv, d, kind, ops.options, ops.shared_limit).shared <= (
                ops.shared_limit
            )
