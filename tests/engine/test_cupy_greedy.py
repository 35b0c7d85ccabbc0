"""The cupy greedy kernel and DeviceRows (engine/ops/cupy_rows.py) on a GPU: the kernel's
token and margin are the host's (`np.argmax`, `sampling.margin`) bit for bit, and the
engine replies the same with a graph step's logits left on the device as copied back."""

from __future__ import annotations

import numpy as np
import pytest

from engine.lanes.sampling import margin
from tests.engine.cupy_setup import GPU_ONLY

pytestmark = GPU_ONLY


def rows_to_check() -> list[np.ndarray]:
    rng = np.random.default_rng(21)
    rows = [rng.standard_normal(n).astype(np.float32) for n in (2, 3, 255, 256, 257, 1000)]
    rows.append(rng.standard_normal(151936).astype(np.float32))
    wide = rng.standard_normal(151936).astype(np.float32)
    wide[[70001, 5, 151935]] = wide.max() + 2  # a tie across threads: the lowest id
    rows.append(wide)
    for at in (0, 999):  # top at either end
        r = rng.standard_normal(1000).astype(np.float32)
        r[at] = 9
        rows.append(r)
    rows.append(np.full(600, 1.5, np.float32))  # all equal: id 0, margin 0
    rows.append(np.full(600, -np.inf, np.float32))  # id 0, margin nan
    inf2 = rng.standard_normal(600).astype(np.float32)
    inf2[[40, 300]] = np.inf  # id 40, margin nan
    rows.append(inf2)
    nan2 = rng.standard_normal(600).astype(np.float32)
    nan2[[300, 41]] = np.nan  # the first NaN: id 41
    rows.append(nan2)
    ints = rng.integers(-3, 4, 5000).astype(np.float32)  # many ties at the top
    rows.append(ints)
    return rows


def test_kernel_equals_the_host_rule() -> None:
    import cupy as cp

    from engine.ops.cupy_rows import greedy_device

    for row in rows_to_check():
        ids, margins = greedy_device(cp.asarray(row[None, :]))
        want_id, want_margin = int(np.argmax(row)), np.float32(margin(row))
        assert int(ids[0]) == want_id, (len(row), int(ids[0]), want_id)
        if np.isnan(want_margin):
            assert np.isnan(margins[0])
        else:
            assert margins[0].tobytes() == want_margin.tobytes(), (len(row), margins[0])


def test_hash_kernel_equals_the_host_hash() -> None:
    """The device's logit hash of every row, alone and as rows of one block, is the
    host's (engine/lanes/sampling.py row_hash_words)."""
    import cupy as cp

    from engine.lanes.sampling import row_hash_words
    from engine.ops.cupy_rows import hash_device

    rows = rows_to_check()
    for row in rows:
        assert hash_device(cp.asarray(row[None, :]))[0] == row_hash_words(row[None, :])[0]
    block = np.stack([r[:600] for r in rows if len(r) >= 600])
    assert list(hash_device(cp.asarray(block))) == list(row_hash_words(block))


def test_kernel_rows_do_not_depend_on_their_neighbours() -> None:
    import cupy as cp

    from engine.ops.cupy_rows import greedy_device

    rng = np.random.default_rng(4)
    block = rng.standard_normal((9, 151936)).astype(np.float32)
    ids, margins = greedy_device(cp.asarray(block))
    for i, row in enumerate(block):
        one_id, one_margin = greedy_device(cp.asarray(row[None, :]))
        assert (int(ids[i]), margins[i].tobytes()) == (int(one_id[0]), one_margin[0].tobytes())
        assert int(ids[i]) == int(np.argmax(row))
        assert margins[i].tobytes() == np.float32(margin(row)).tobytes()


def test_device_rows_read_as_the_host_array() -> None:
    import cupy as cp

    from engine.ops.cupy_rows import DeviceRows, RowBlock

    rng = np.random.default_rng(6)
    host = rng.standard_normal((5, 70000)).astype(np.float32)
    rows = DeviceRows(RowBlock(cp.asarray(host)), 0, 5)
    assert rows.shape == (5, 70000) and len(rows) == 5
    assert np.asarray(rows).tobytes() == host.tobytes()
    assert rows[1:4].tobytes() == host[1:4].tobytes()
    assert np.asarray(rows[-1]).tobytes() == host[-1].tobytes()
    assert rows[2].shape == (70000,) and rows[2][7] == host[2, 7]
    ids, margins = rows[1:4].greedy()
    assert ids.tolist() == [int(np.argmax(r)) for r in host[1:4]]
    assert margins.tobytes() == np.asarray([margin(r) for r in host[1:4]], np.float32).tobytes()
    with pytest.raises(IndexError):
        rows[5]


def test_engine_with_device_logits_equals_host_logits(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The tiny model's logits (512 wide) forced onto the device path (DEVICE_ROW_BYTES 0):
    the same replies, ids, margins and hashes, as copied back to the host, at 1 and 4
    lanes, greedy and sampled; with ENGINE_LOGIT_HASHES=0 the same ids and margins."""
    from engine.model.loader import load_model
    from engine.ops import cupy_graph
    from tests.conformance.conftest import TINY, mixed
    from tests.engine.conftest import run_requests

    model = load_model(TINY, "cupy")
    reqs = mixed(max_tokens=8, salt=5)
    monkeypatch.setattr(cupy_graph, "DEVICE_ROW_BYTES", 1 << 40)
    host = {p: run_requests(model, reqs, context=320, parallel=p) for p in (1, 4)}
    monkeypatch.setattr(cupy_graph, "DEVICE_ROW_BYTES", 0)
    for p in (1, 4):
        assert run_requests(model, reqs, context=320, parallel=p) == host[p], f"parallel {p}"
        monkeypatch.setenv("ENGINE_LOGIT_HASHES", "0")
        bare = run_requests(model, reqs, context=320, parallel=p)
        monkeypatch.delenv("ENGINE_LOGIT_HASHES")
        for rid, r in host[p].items():
            assert (bare[rid].ids, bare[rid].margins) == (r.ids, r.margins)
            assert bare[rid].logit_hashes == ()
