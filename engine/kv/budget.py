"""The memory a layout needs, computed from the plan before anything is allocated, so a
`--context`/`--parallel`/`--kv-pages` that cannot fit is refused with the bytes needed and
available (exit 2), not found by a MemoryError halfway through allocating."""

from __future__ import annotations

import os
from typing import Any

from engine.errors import InputError
from engine.kv import codec

F32 = 4
HEADROOM = 0.9  # of what is available: the weights and the working buffers need some too


def kv_bytes(cfg: Any, pages: int, page_rows: int, kind: str, lanes: int, lane_rows: int) -> int:
    """Bytes of the page store (codes, and fp8's exponents) and the lanes' float32 rows, for
    K and V of every layer (engine/kv/store.py, engine/ops/*_lanes.py)."""
    per_row = cfg.num_kv_heads * cfg.head_dim
    code = codec.code_dtype(kind).itemsize * per_row + (cfg.num_kv_heads if kind == "fp8" else 0)
    store = pages * page_rows * code
    lane = lanes * lane_rows * per_row * F32
    return 2 * cfg.num_layers * (store + lane)


def host_available() -> int | None:
    """MemAvailable (Linux), else physical memory; None when neither can be read."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


def check(need: int, available: int | None, what: str) -> None:
    """InputError when ``need`` bytes do not fit in ``available`` (None: unknown, no check)."""
    if available is None or need <= available * HEADROOM:
        return
    raise InputError(
        f"{what}: the KV cache needs {need} bytes ({_gib(need)}) but {available} bytes "
        f"({_gib(available)}) are available; lower --context, --parallel or --kv-pages"
    )


def failed(need: int | None, what: str) -> InputError:
    """The error for an allocation that failed although the estimate fitted."""
    size = f"{need} bytes ({_gib(need)})" if need else "its memory"
    return InputError(f"{what}: the KV cache needs {size}, and allocating it failed")
