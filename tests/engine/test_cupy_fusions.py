"""Fused launches of the cupy backend against the launches they replace (marked `gpu`):
the q/k norms, RoPE and the K/V write in one launch, and the split attention that merges in
its last block. Bit for bit: codes, exponents, q, attention output and its bf16 twin."""

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


@pytest.fixture(scope="module")
def ops_tail():  # type: ignore[no-untyped-def]
    """A backend made with the split kernels that take a short last chunk beside the one
    before (their module of their own, compiled only when asked for)."""
    from engine.ops.cupy_ops import CupyOps
    from engine.ops.cupy_options import CupyOptions

    return CupyOps(CupyOptions(attend_tail=1))


@pytest.fixture(scope="module")
def ops_fs():  # type: ignore[no-untyped-def]
    """A backend made with the attention that stores (its kernels are a module of their own,
    compiled only when asked for)."""
    from engine.ops.cupy_ops import CupyOps
    from engine.ops.cupy_options import CupyOptions

    return CupyOps(CupyOptions(attend_store=1))


def _codes(kv, layer: int) -> list[bytes]:  # type: ignore[no-untyped-def]
    arrays = [kv.k[layer], kv.v[layer]]
    if kv.k_exp is not None:
        arrays += [kv.k_exp[layer], kv.v_exp[layer]]
    return [a.tobytes() for a in arrays]


@pytest.mark.parametrize("kind", ["f32", "bf16", "fp8"])
def test_norm_rope_store_equals_norm_rope_then_store(ops, kind) -> None:  # type: ignore[no-untyped-def]
    """qk_norm_rope_store == qk_norm_rope, then store_rows of k and of v (a slice of qkv):
    q's bits and every stored byte, at head dims 64 and 128, 1-9 rows, padding rows in the
    scratch page."""
    import cupy as cp

    from engine.ops.cupy_kv import KVTarget, store_rows

    rng = np.random.default_rng(5)
    for d, hq, hkv, n in ((64, 4, 2, 1), (64, 4, 2, 9), (128, 16, 8, 8), (128, 8, 8, 3)):
        pages, page_rows = 6, 16
        one, two = (ops.new_kv(2, pages, page_rows, hkv, d, kind, 1, 64) for _ in "12")
        qkv = ops.asarray(3 * rng.standard_normal((n, (hq + 2 * hkv) * d)).astype(np.float32))
        qw, kw = (ops.asarray(rng.standard_normal(d).astype(np.float32)) for _ in "qk")
        cos, sin = (ops.asarray(rng.standard_normal((n, d // 2)).astype(np.float32)) for _ in "cs")
        slots_host = rng.choice(pages * page_rows, n, replace=False).astype(np.int64)
        slots_host[-1] = one.scratch * page_rows  # a padding row: the scratch page
        slots = cp.asarray(slots_host)
        q1, k1 = ops.qk_norm_rope(qkv, hq, hkv, qw, kw, 1e-6, cos, sin)
        v = qkv[:, (hq + hkv) * d :].reshape(n, hkv, d)
        ke1 = one.k_exp[1] if one.k_exp else None
        ve1 = one.v_exp[1] if one.v_exp else None
        store_rows(ops, k1, v, (one.k[1], ke1), (one.v[1], ve1), slots, kind)
        ke2 = two.k_exp[1] if two.k_exp else None
        ve2 = two.v_exp[1] if two.v_exp else None
        target = KVTarget((two.k[1], ke2), (two.v[1], ve2), slots, kind)
        q2 = ops.qk_norm_rope_store(qkv, hq, hkv, qw, kw, 1e-6, cos, sin, target)
        assert q2.tobytes() == q1.tobytes(), (d, n)
        assert _codes(two, 1) == _codes(one, 1), (d, n)
        assert _codes(two, 0) == _codes(one, 0)  # the other layer untouched


@pytest.mark.parametrize("early", [0, 1])
@pytest.mark.parametrize("heads", [1, 2, 4])
@pytest.mark.parametrize("kind", ["f32", "bf16"])
def test_split_attention_merges_in_its_last_block(  # type: ignore[no-untyped-def]
    ops, monkeypatch, kind, heads, early
) -> None:
    """The split launch (its last block merging; a block of 1, 2 or 4 q heads of one KV
    head, the chunk staged once for them) == the one-block-per-pair launch, launch after
    launch: each merging slot sets its counter back, so a second and third launch over the
    same counters elect again (all counters read zero after each). With `early` the first
    chunk's keys up to last - n are sent before the wait: whole chunks (row 300, group 0),
    part of one (rows 127, 128 and 300), none (row 0; row 128's second group). Chunks of
    1, 45 and 128 keys (no whole run of 32 keys, a run and a tail, all runs) pass through both
    forms' value passes, which share value_run: the tile test (test_cupy_attend_tile.py)
    checks them against the tile kernel's own value pass. The split launch scores a key a
    thread from padded K rows, the pair launch a key a warp."""
    import cupy as cp

    from engine.ops.cupy_attend_plan import choose

    rng = np.random.default_rng(17)
    pages, page_rows, hq, hkv, d, n = 12, 32, 8, 2, 128, 5
    shape = ((pages + 1) * page_rows, hkv, d)  # the scratch page too
    kv = ops.new_kv(1, pages, page_rows, hkv, d, kind, 1, pages * page_rows)
    for codes in (kv.k[0], kv.v[0]):
        x = rng.standard_normal(shape).astype(np.float32)
        codes[...] = cp.asarray(x if kind == "f32" else _bf16_bits(x))
    ptab = cp.asarray(rng.permutation(pages).astype(np.int32))
    last = cp.asarray(np.array([0, 127, 128, 300, pages * page_rows - 1], dtype=np.int32))
    meta = (ptab, cp.zeros(n, dtype=cp.int32), last, page_rows)
    q = cp.asarray(rng.standard_normal((n, hq, d)).astype(np.float32))
    got = {}
    for split in (0, 10**6, 10**6, 10**6):
        opts = dataclasses.replace(
            ops.options,
            attend_split=split,
            attend_split_heads=heads,
            attend_heads_from=1,
            attend_early=early,
        )
        monkeypatch.setattr(ops, "options", opts)
        if split:
            assert choose(n, hq, hkv, d, kind, opts, ops.shared_limit).heads == heads
        out = ops.attend(kind, q, kv.k[0], kv.v[0], None, None, meta)
        twin = ops._bf16[1]
        got.setdefault(split, []).append((out.tobytes(), twin.tobytes()))
        assert not bool(ops.split_counters(1).any())
    assert all(g == got[0][0] for g in got[10**6] + got[0])


@pytest.mark.parametrize("early", [0, 1])
@pytest.mark.parametrize("heads", [1, 2, 4])
@pytest.mark.parametrize("kind", ["f32", "bf16", "fp8"])
def test_split_attention_takes_a_short_last_chunk_beside_the_one_before(  # type: ignore[no-untyped-def]
    ops_tail, monkeypatch, kind, heads, early
) -> None:
    """options.attend_tail (the launch's blocks all resident, so the tail is taken) == the
    split launch without it == the one-block-per-pair launch, outputs and bf16 twins, at head
    dims 32, 64 and 128, for rows whose group of the last chunk takes it beside the chunk
    before (at 128: 1, 3, 31 and 32 keys, the guarded value pass and a whole run, groups 0 and
    1, two and three turns; at 32 every last chunk) and rows that keep a turn of their own (33
    and 128 keys) or have one turn a group; with early copies and without; on keys and q of
    either sign, then on scores all below zero (K codes of no sign, q negative: a tail padded
    with 0 instead of -inf, or weighed against the chunk's max, would show); twice over the
    same counters."""
    import cupy as cp

    from engine.ops.cupy_attend_plan import GROUPS, choose, tail_fits

    rng = np.random.default_rng(41)
    pages, page_rows, hkv = 40, 32, 1
    hq = 4 if heads == 4 else 2  # 80 or 40 blocks: the f32 tail fits every SM count >= 80
    lasts = [512, 514, 542, 543, 544, 640, 1026, pages * page_rows - 1, 300, 0]
    n = len(lasts)
    last = cp.asarray(np.array(lasts, dtype=np.int32))
    ptab = cp.asarray(rng.permutation(pages).astype(np.int32))
    meta = (ptab, cp.zeros(n, dtype=cp.int32), last, page_rows)
    sign_bit = {"f32": None, "bf16": 0x7FFF, "fp8": 0x7F}[kind]
    for d in (32, 64, 128):
        kv = ops_tail.new_kv(1, pages, page_rows, hkv, d, kind, 1, pages * page_rows)
        _fill_codes(kv, rng)
        ke, ve = (kv.k_exp[0], kv.v_exp[0]) if kv.k_exp else (None, None)
        q = cp.asarray(rng.standard_normal((n, hq, d)).astype(np.float32))
        for negative in (False, True):
            if negative:  # every score below zero
                k = kv.k[0]
                k[...] = cp.abs(k) if sign_bit is None else k & sign_bit
                q = -cp.abs(q)
            got = []
            for split, tail in ((0, 0), (10**6, 0), (10**6, 1), (10**6, 1)):
                opts = dataclasses.replace(
                    ops_tail.options,
                    attend_split=split,
                    attend_split_heads=heads,
                    attend_heads_from=1,
                    attend_early=early,
                    attend_tail=tail,
                )
                monkeypatch.setattr(ops_tail, "options", opts)
                if tail:
                    form = choose(n, hq, hkv, d, kind, opts, ops_tail.shared_limit)
                    blocks = n * (hq // form.heads) * GROUPS
                    regs = ops_tail.tail_regs[kind, d, form.kernel + "_tail"]
                    assert form.heads == heads
                    assert tail_fits(form, blocks, kind, d, ops_tail.device_shape, regs), (d, regs)
                out = ops_tail.attend(kind, q, kv.k[0], kv.v[0], ke, ve, meta)
                got.append((out.tobytes(), ops_tail._bf16[1].tobytes()))
                assert not bool(ops_tail.split_counters(1).any())
            assert got[1] == got[0] and got[2] == got[0] and got[3] == got[0], (d, negative)


def _bf16_bits(x: np.ndarray) -> np.ndarray:
    import ml_dtypes

    return x.astype(ml_dtypes.bfloat16).view(np.uint16)


def test_embed_norm_concat_equals_its_ops(ops) -> None:  # type: ignore[no-untyped-def]
    """The MTP input in one launch == embed, rms_norm of each half, concatenation; its bf16
    twin == the conversion the fc linear would make (the linear's bits equal)."""
    import cupy as cp

    rng = np.random.default_rng(23)
    for h, n in ((128, 1), (128, 8), (1024, 5), (96, 3)):
        table = ops.asarray(rng.standard_normal((50, h)).astype(np.float32))
        ids = cp.asarray(rng.integers(0, 50, n).astype(np.int64))
        hidden = ops.asarray(rng.standard_normal((n, h)).astype(np.float32))
        we, wh = (ops.asarray(rng.standard_normal(h).astype(np.float32)) for _ in "eh")
        fused = ops.embed_norm_concat(table, ids, hidden, we, wh, 1e-6)
        assert ops._twin_of(fused) is not None  # the fc linear reads its bf16 twin
        lin = ops.prepare_linear(rng.standard_normal((16, 2 * h)).astype(np.float32))
        via_twin = ops.linear(fused, lin)
        e = ops.rms_norm(ops.embed(table, ids), we, 1e-6)
        plain = cp.concatenate([e, ops.rms_norm(hidden, wh, 1e-6)], axis=1)
        assert fused.tobytes() == plain.tobytes(), (h, n)
        assert via_twin.tobytes() == ops.linear(plain.copy(), lin).tobytes(), (h, n)


def _fill_codes(kv, rng) -> None:  # type: ignore[no-untyped-def]
    """Every slot of every layer: codes of random values (fp8: no NaN codes) and exponents."""
    import cupy as cp

    for codes in (*kv.k, *kv.v):
        shape = codes.shape
        if kv.kind == "f32":
            codes[...] = cp.asarray(rng.standard_normal(shape).astype(np.float32))
        elif kv.kind == "bf16":
            codes[...] = cp.asarray(_bf16_bits(rng.standard_normal(shape).astype(np.float32)))
        else:
            mag = rng.integers(0, 0x78, shape) | (rng.integers(0, 2, shape) << 7)
            codes[...] = cp.asarray(mag.astype(np.uint8))
    for exps in (*(kv.k_exp or []), *(kv.v_exp or [])):
        exps[...] = cp.asarray(rng.integers(-3, 4, exps.shape).astype(np.int8))


@pytest.mark.parametrize("early", [0, 1])
@pytest.mark.parametrize("heads", [1, 2, 4])
@pytest.mark.parametrize("kind", ["f32", "bf16", "fp8"])
def test_attention_that_stores_equals_store_then_attend(
    ops_fs, monkeypatch, kind, heads, early
) -> None:  # type: ignore[no-untyped-def]
    """The split launch that makes the q/k norms, RoPE and K/V write itself (attend_qkv) ==
    qkv_norm_rope_store, then the split attention: the live rows' outputs and bf16 twins and
    every stored byte outside the scratch page, at head dims 64 and 128, for a decode row, a
    verify run of 5 rows across a chunk boundary (rows that see keys their step made in
    other rows), a stream's first 3 rows and 3 padding rows; twice over the same counters."""
    import cupy as cp

    from engine.ops.base import KVSegment

    rng = np.random.default_rng(29)
    hq, hkv, pages, page_rows, eps = 8, 2, 40, 16, 1e-6
    order = [int(p) for p in rng.permutation(pages)]
    segs = [
        KVSegment(0, order[:9], 130, 1),
        KVSegment(1, order[9:18], 126, 5),
        KVSegment(2, order[18:19], 0, 3),
    ]
    rows, live = 12, 9
    for d in (64, 128):
        base = dataclasses.replace(
            ops_fs.options, attend_split_heads=heads, attend_heads_from=1, attend_early=early
        )
        kvs = [ops_fs.new_kv(2, pages, page_rows, hkv, d, kind, 3, 20 * page_rows) for _ in "ab"]
        for kv in kvs:
            _fill_codes(kv, np.random.default_rng(31))
        qkv = ops_fs.asarray(3 * rng.standard_normal((rows, (hq + 2 * hkv) * d)).astype(np.float32))
        qw, kw = (ops_fs.asarray(rng.standard_normal(d).astype(np.float32)) for _ in "qk")
        cos, sin = (
            ops_fs.asarray(rng.standard_normal((rows, d // 2)).astype(np.float32)) for _ in "cs"
        )
        heads_in = (hq, hkv, qw, kw, eps, cos, sin)
        got = []
        for kv, store in zip(kvs, (0, 1), strict=True):
            monkeypatch.setattr(ops_fs, "options", dataclasses.replace(base, attend_store=store))
            placed = kv.fixed_rows(segs, rows)
            dev = {name: cp.asarray(a) for name, a in placed.items()}
            for _ in range(2):
                sa = kv.fixed_attend(1, dev)
                if store:
                    out = sa.attend_qkv(qkv, *heads_in)
                    assert out is not None, "no fused launch"
                else:
                    out = sa.attend(ops_fs.qk_norm_rope_store(qkv, *heads_in, sa.target))
                twin = ops_fs._bf16[1].reshape(rows, -1)
                got.append((out[:live].tobytes(), twin[:live].tobytes()))
                assert not bool(ops_fs.split_counters(1).any())
        assert got[2] == got[0] and got[3] == got[1], (d, "output")
        kept = pages * page_rows  # the scratch page's slots are the padding rows'
        for layer in (0, 1):
            a, b = (_codes_of(kv, layer, kept) for kv in kvs)
            assert a == b, (d, layer, "stored bytes")


def _codes_of(kv, layer: int, slots: int) -> list[bytes]:  # type: ignore[no-untyped-def]
    arrays = [kv.k[layer][:slots], kv.v[layer][:slots]]
    if kv.k_exp is not None:
        arrays += [kv.k_exp[layer][:slots], kv.v_exp[layer][:slots]]
    return [a.tobytes() for a in arrays]
