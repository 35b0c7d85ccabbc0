"""The backend's own GEMMs (ENGINE_CUPY_GEMM=own, engine/ops/cupy_gemm.cu, and =mma,
cupy_mma.cu) on a GPU: a row's bits at every row count, and the dot product they compute
(marked `gpu`; skipped where cupy cannot run)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from tests.engine.cupy_setup import GPU_ONLY

pytestmark = GPU_ONLY


@pytest.fixture(scope="module", params=["own", "mma"])
def own_ops(request):  # type: ignore[no-untyped-def]
    from engine.ops.cupy_ops import CupyOps
    from engine.ops.cupy_options import CupyOptions

    return CupyOps(CupyOptions(gemm=request.param))


def test_own_gemm_keeps_a_rows_bits_at_every_row_count(own_ops) -> None:  # type: ignore[no-untyped-def]
    """ENGINE_CUPY_GEMM=own and =mma: a row's output has the same bits alone as at each of the
    first nine places, and at shuffled places, of launches of 1..70 and 512 rows (row groups
    of 8, their last one short), beside any neighbours, for every way of cutting the work
    (own: one and two outputs a warp; mma: 1, 2, 4 and 8 tiles of x rows a warp, at 1 tile
    with the chunks in flight fitted to K (2 or 6, the _1u2 and _1u6 kernels) and with 4,
    and, for a row alone, blocks of 8 outputs where N is small: n 1024 at K 2048 and 3072)
    and a tail
    of outputs short of a block; and it is the dot product in f32 (against float64, to
    rounding)."""
    import cupy as cp

    from engine.ops import cupy_gemm

    rng = np.random.default_rng(21)
    for n, k in ((1003, 256), (4096, 1024), (1024, 2048), (1024, 3072), (70001, 64)):
        w_host = (rng.standard_normal((n, k)) / np.sqrt(k)).astype(np.float32)
        w = own_ops.prepare_linear(w_host)
        rows = rng.standard_normal((512, k)).astype(np.float32)
        alone = [own_ops.to_numpy(own_ops.linear(own_ops.asarray(r[None]), w)) for r in rows[:9]]
        for m in (*range(1, 71), 512):
            got = own_ops.to_numpy(own_ops.linear(own_ops.asarray(rows[:m]), w))
            for i in range(min(m, 9)):
                assert got[i : i + 1].tobytes() == alone[i].tobytes(), (n, k, m, i)
        shuffled = rng.permutation(512)[:40]
        got = own_ops.to_numpy(own_ops.linear(own_ops.asarray(rows[shuffled]), w))
        for j, i in enumerate(shuffled):
            if i < 9:
                assert got[j : j + 1].tobytes() == alone[i].tobytes(), (n, k, i)
        x20 = own_ops.asarray(rows[:20])
        twin = cp.asarray(rows[:20].astype(ml_dtypes.bfloat16).view(np.uint16))  # its bf16 bits
        if own_ops.options.gemm == "mma":
            one, *cuts = (cupy_gemm.mma(own_ops, twin, 20, w, t) for t in cupy_gemm.MMA_TILES)
            cuts.append(cupy_gemm.mma(own_ops, twin, 20, w, 1, fit=False))  # U = 4 at 1 tile
        else:
            one, *cuts = (cupy_gemm.gemm(own_ops, twin, 20, w, outs) for outs in (1, 2))
        for cut in cuts:  # how the work is cut: the same bits
            assert one.tobytes() == cut.tobytes(), (n, k)
        assert own_ops.linear(x20, w).tobytes() == one.tobytes(), (n, k)
        wb = w_host.astype(ml_dtypes.bfloat16).astype(np.float64)
        xb = rows[:16].astype(ml_dtypes.bfloat16).astype(np.float64)
        want = xb @ wb.T
        got = own_ops.to_numpy(own_ops.linear(own_ops.asarray(rows[:16]), w))
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.sqrt(k))
