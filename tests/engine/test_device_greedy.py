"""Greedy picks where the logits are, and logit hashes only when asked (issue 28).

A backend may hand logits back as rows that stay on its device (an array-like with
`greedy()`, engine/ops/cupy_rows.py). The engine then takes a greedy row's token and margin
from `greedy()` and reads the whole row to the host only for a hash or a sampled token.
Here a host stand-in of such rows counts what the engine reads; the cupy kernel itself is
tested on a GPU in test_cupy_greedy.py."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from engine.config import EngineConfig
from engine.errors import InputError
from engine.lanes.engine import Engine
from engine.lanes.request import Request
from engine.lanes.sampling import margin
from tests.engine.conftest import Result


class CountedRows:
    """Logits rows [k, V] that count whole-row reads; greedy() by the host rule."""

    def __init__(self, rows: np.ndarray, reads: list[int]) -> None:
        self.rows, self.reads = rows, reads

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, slice):
            return CountedRows(self.rows[key], self.reads)
        self.reads.append(1)
        return self.rows[key]

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        self.reads.append(len(self.rows))
        return self.rows if dtype is None else self.rows.astype(dtype)

    def greedy(self) -> tuple[np.ndarray, np.ndarray]:
        ids = np.asarray([int(np.argmax(r)) for r in self.rows], dtype=np.int64)
        return ids, np.asarray([margin(r) for r in self.rows], dtype=np.float32)


class DeviceRowsModel:
    """The tiny model, its logits handed out as CountedRows."""

    def __init__(self, model: Any) -> None:
        self.model, self.config, self.reads = model, model.config, []

    def new_kv(self, *a: Any, **kw: Any) -> Any:
        return self.model.new_kv(*a, **kw)

    def forward(self, segments: list, kv: Any, taps: tuple[int, ...] = ()) -> list:
        outs = self.model.forward(segments, kv, taps)
        for out in outs:
            if out.logits is not None:
                out.logits = CountedRows(out.logits, self.reads)
        return outs


def requests(temperature: float) -> list[Request]:
    rng = np.random.default_rng(5)
    return [
        Request(
            id=f"r{i}",
            prompt_ids=rng.integers(1, 500, 3 + 7 * i).tolist(),
            max_tokens=6,
            temperature=temperature,
            seed=i,
            ignore_eos=True,
        )
        for i in range(3)
    ]


def run(model: Any, reqs: list[Request], **flags: str) -> dict[str, Result]:
    engine = Engine(model, EngineConfig(parallel=3, context=64, flags=dict(flags)))
    streams = [engine.submit(r) for r in reqs]
    engine.run()
    return {s.req.id: Result.of(s) for s in streams}


@pytest.mark.parametrize("temperature", [0.0, 0.7])
def test_device_rows_reply_as_host_rows(tiny: Any, temperature: float) -> None:
    """Ids, margins and hashes from rows with greedy() equal those of plain host rows."""
    reqs = requests(temperature)
    want = run(tiny, reqs)
    assert run(DeviceRowsModel(tiny), reqs) == want
    assert all(len(r.logit_hashes) == len(r.ids) == 6 for r in want.values())


def test_greedy_without_hashes_reads_no_row(tiny: Any) -> None:
    """ENGINE_LOGIT_HASHES=0: the same ids and margins, no hashes, and greedy rows never
    read to the host (planted: hashing regardless of the flag reads every row, red)."""
    model = tiny
    reqs = requests(0.0)
    want = run(model, reqs)
    wrapped = DeviceRowsModel(model)
    got = run(wrapped, reqs, ENGINE_LOGIT_HASHES="0")
    assert wrapped.reads == []
    for rid, r in want.items():
        assert (got[rid].ids, got[rid].margins) == (r.ids, r.margins)
        assert got[rid].logit_hashes == ()
    sampled = DeviceRowsModel(model)
    run(sampled, requests(0.7), ENGINE_LOGIT_HASHES="0")
    assert sampled.reads  # a sampled row is drawn on the host


def test_bad_logit_hashes_flag_is_one_line(tiny: Any) -> None:
    model = tiny
    with pytest.raises(InputError, match="ENGINE_LOGIT_HASHES: expected 0 or 1, got 'no'"):
        Engine(model, EngineConfig(flags={"ENGINE_LOGIT_HASHES": "no"}))
