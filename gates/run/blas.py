"""A BLAS kernel whose bits follow the row count, for arms of rules with ``blas: row-variant``.

The numpy backend is exact because every linear layer runs on fixed tiles of 8 rows: then a
row's bits cannot depend on how many rows share its step. A head that drops the tiles (a
plain ``x @ w`` over a step of 64 rows) is exact only on a BLAS whose kernel happens to
give a row the same bits at 8 and at 64 rows, as this VM's native OpenBLAS kernel (AVX-512)
does, and a gate run there cannot see it. OpenBLAS built with ``DYNAMIC_ARCH`` (numpy's and
scipy's wheels) takes ``OPENBLAS_CORETYPE``: the older kernels (Haswell, Zen, ...) give a
row other bits at other row counts, and still the same bits at any position of an 8-row
tile (the engine's load-time probe checks that). Arms of a ``blas: row-variant`` rule run on
the first such kernel this machine can run, on base and head alike, so the gate's power
no longer depends on the runner's BLAS.
"""

from __future__ import annotations

import functools
import os
import subprocess

CANDIDATES = ("Haswell", "Zen", "Prescott", "Core2", "Penryn", "Opteron")

# exit 0: row-count variant and tile-8 invariant; 3: row-count invariant; 4: not tile-invariant
_PROBE = """
import sys, numpy as np
F = np.float32
def tiled(x, w, t=8):
    m = x.shape[0]; p = -(-m // t) * t
    xp = np.zeros((p, x.shape[1]), F); xp[:m] = x
    return np.matmul(xp.reshape(p // t, t, -1), w).reshape(-1, w.shape[1])[:m]
rng = np.random.default_rng(0)
varies = False
for k, n in ((128, 128), (128, 384), (384, 128)):
    w = rng.standard_normal((k, n)).astype(F)
    row = rng.standard_normal(k).astype(F)
    alone = tiled(row[None], w)[0]
    for pos in range(1, 17, 3):
        x = rng.standard_normal((17, k)).astype(F); x[pos] = row
        if not np.array_equal(tiled(x, w)[pos], alone):
            sys.exit(4)
    for m in (16, 33, 64):
        x = rng.standard_normal((m, k)).astype(F)
        varies |= not np.array_equal(np.matmul(x, w), tiled(x, w))
sys.exit(0 if varies else 3)
"""


def _probe(python: str, coretype: str) -> int | None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGINE_")}
    env.update(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", OPENBLAS_CORETYPE=coretype)
    try:
        done = subprocess.run(
            [python, "-c", _PROBE], env=env, capture_output=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.returncode


@functools.lru_cache(maxsize=8)
def row_variant_kernel(python: str) -> tuple[str | None, str]:
    """(OPENBLAS_CORETYPE, "") of a kernel whose bits follow the row count and keep 8-row
    tiles position-invariant, or (None, why there is none on this machine)."""
    for core in CANDIDATES:
        if _probe(python, core) == 0:
            return core, ""
    return None, (
        "no BLAS kernel on this machine gives other bits at other row counts "
        f"(OPENBLAS_CORETYPE tried: {', '.join(CANDIDATES)})"
    )
