"""ENGINE_CALIBRATE_SLOWDOWN: a planted slowdown of known size, to calibrate speed gates.

``ENGINE_CALIBRATE_SLOWDOWN=0.05`` makes every engine action (a prompt step or a decoding
round) busy-wait, after its work, for 5 % of the CPU time that work took, so the process
spends 5 % more CPU time and wall time per token, the tokens unchanged. Unset or 0: no
cost beyond one branch per action. Only the calibration of the speed gates sets it
(``python -m gates.speed_calibrate``); the gate runner removes every ``ENGINE_*`` variable
from a real comparison.
"""

from __future__ import annotations

import os
import time

from engine.errors import InputError

VAR = "ENGINE_CALIBRATE_SLOWDOWN"


def slowdown() -> float:
    """The planted slowdown as a fraction of each action's CPU time (0 when unset)."""
    raw = os.environ.get(VAR, "").strip()
    if not raw:
        return 0.0
    try:
        value = float(raw)
    except ValueError:
        raise InputError(f"{VAR}: expected a fraction like 0.05, got '{raw}'") from None
    if not 0.0 <= value <= 10.0:
        raise InputError(f"{VAR}: expected a fraction in [0, 10], got {value}")
    return value


def burn(cpu_s: float) -> None:
    """Spin until this process has used ``cpu_s`` more CPU seconds.

    Spins on the cheap wall clock and reads the CPU clock (a system call, which on some
    machines flushes the TLB and slows the work after it) at most every 50 µs."""
    end = time.process_time() + cpu_s
    while (left := end - time.process_time()) > 0:
        stop = time.perf_counter() + min(left, 5e-5)
        while time.perf_counter() < stop:
            pass
