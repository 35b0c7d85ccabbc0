"""The sparse MLP (engine/ops/moe.py; on cupy engine/ops/cupy_moe.py), bit for bit on
numpy, mlx and cupy: a row's output alone
equals its output in any batch (row counts 1..40, around the row tile), under any expert
load (all rows on one expert, spread, most experts empty) and beside any neighbours; it
equals a per-row reference that sums the k expert outputs by rank; routing ties go to the
lower expert id."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from engine.model.moe import build_moe
from engine.ops import cupy_problem, get_ops
from engine.ops.moe import MoeWeights, route
from tests.engine.randmodel import random_config, random_tensors

BACKENDS = ["numpy", "mlx", pytest.param("cupy", marks=pytest.mark.gpu)]
SIZES = list(range(1, 41))
CFG = random_config(hidden=64, layers=1, experts=8, top_k=2, moe_inter=32)
P = "model.layers.0."


def ops_for(name: str) -> Any:
    if name == "mlx":
        pytest.importorskip("mlx.core")
    if name == "cupy" and cupy_problem() is not None:
        pytest.skip(f"cupy backend: {cupy_problem()}")
    if name not in _ops:
        _ops[name] = get_ops(name)
    return _ops[name]


_ops: dict[str, Any] = {}


def routed(ops: Any, xr: Any, moe: MoeWeights) -> tuple[np.ndarray, np.ndarray]:
    """A row's (ids, weights) as the backend's moe_ffn routes it: on the device for cupy
    (its own float32 exp), on the host elsewhere."""
    logits = ops.linear(xr, moe.router)
    if hasattr(ops, "moe_route"):
        ids, w = ops.moe_route(logits, moe.top_k, moe.norm_topk_prob)
        return np.asarray(ops.to_numpy(ids)), np.asarray(ops.to_numpy(w))
    return route(np.asarray(ops.to_numpy(logits)), moe.top_k, moe.norm_topk_prob)


def block(ops: Any, cfg: Any = CFG, steer: bool = False, seed: int = 0) -> MoeWeights:
    """The sparse MLP of a random model; `steer`: the router reads input column e (x 8) for
    expert e, so a row's experts can be chosen by setting those columns."""
    t = random_tensors(cfg, seed)
    if steer:
        w = t[P + "mlp.gate.weight"] * 0.01
        w[:, : cfg.num_experts] += 8.0 * np.eye(cfg.num_experts, dtype=np.float32)
        t[P + "mlp.gate.weight"] = w
    return build_moe(cfg, t, P, ops)


def run(ops: Any, moe: MoeWeights, x: np.ndarray) -> np.ndarray:
    return np.asarray(ops.to_numpy(ops.moe_ffn(ops.asarray(x), moe)))


def rows(seed: int, m: int, h: int = 64) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((m, h)).astype(np.float32)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("top_k", [2, 3])
def test_row_alone_equals_row_in_any_batch(backend, top_k):
    """top_k 3: with two outputs a + b == b + a, so only three or more show a sum order."""
    ops = ops_for(backend)
    cfg = random_config(hidden=64, layers=1, experts=8, top_k=top_k, moe_inter=32)
    moe = block(ops, cfg)
    for m in SIZES:
        x = rows(m, m)
        got = run(ops, moe, x)
        for r in sorted({0, m // 2, m - 1}):
            alone = run(ops, moe, x[r : r + 1])[0]
            assert got[r].tobytes() == alone.tobytes(), (m, r)


def steered(m: int, pick: Any, seed: int) -> np.ndarray:
    """m rows; row i routed to experts pick(i) (first, second) by large steering columns."""
    x = rows(seed, m) * 0.1
    for i in range(m):
        first, second = pick(i)
        x[i, :8] = 0.0
        x[i, first], x[i, second] = 3.0, 2.0
    return x


LOADS = {
    "all_on_one": lambda i: (3, 5),
    "spread": lambda i: (i % 8, (i + 3) % 8),
    "one_hot_spot": lambda i: (6, i % 6) if i % 2 else (i % 5, 6),
    "two_experts_only": lambda i: (1, 2) if i % 3 else (2, 1),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("load", sorted(LOADS))
def test_any_expert_load_gives_a_row_its_solo_bits(backend, load):
    ops = ops_for(backend)
    moe = block(ops, steer=True)
    pick = LOADS[load]
    for m in (1, 2, 7, 8, 9, 16, 17, 33):
        x = steered(m, pick, seed=m)
        ids, _ = route(np.asarray(ops.to_numpy(ops.linear(ops.asarray(x), moe.router))), 2, True)
        assert [tuple(r) for r in ids] == [pick(i) for i in range(m)]  # the load is as planned
        got = run(ops, moe, x)
        for r in range(m):
            assert got[r].tobytes() == run(ops, moe, x[r : r + 1])[0].tobytes(), (m, r)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("top_k", [2, 3])
def test_neighbours_and_position_do_not_matter(backend, top_k):
    ops = ops_for(backend)
    cfg = random_config(hidden=64, layers=1, experts=8, top_k=top_k, moe_inter=32)
    moe = block(ops, cfg)
    row = rows(99, 1)[0]
    alone = run(ops, moe, row[None])[0]
    for m in (2, 8, 9, 24, 40):
        for seed in range(3):
            x = rows(1000 + 10 * m + seed, m)
            x[: m // 2] = row  # half the batch shares the row's experts
            pos = (seed * 7) % m
            x[pos] = row
            assert run(ops, moe, x)[pos].tobytes() == alone.tobytes(), (m, seed)


def reference(ops: Any, moe: MoeWeights, x: np.ndarray) -> np.ndarray:
    """Per row: route, run its k experts on the row alone, sum weighted outputs by rank."""
    out = []
    for row in x:
        xr = ops.asarray(row[None])
        ids, w = routed(ops, xr, moe)
        acc = None
        for r in range(moe.top_k):
            gu = ops.expert_linear(xr, moe.gate_up[int(ids[0, r])])
            h = ops.silu_mul(gu[:, : moe.inter], gu[:, moe.inter :])
            y = ops.scale_rows(ops.expert_linear(h, moe.down[int(ids[0, r])]), w[:, r])
            acc = y if acc is None else ops.add(acc, y)
        out.append(np.asarray(ops.to_numpy(acc))[0])
    return np.stack(out)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("top_k", [2, 3, 8])
def test_outputs_summed_by_rank_as_a_per_row_reference(backend, top_k):
    ops = ops_for(backend)
    cfg = random_config(hidden=64, layers=1, experts=8, top_k=top_k, moe_inter=32)
    moe = block(ops, cfg, seed=top_k)
    x = rows(top_k, 19)
    assert run(ops, moe, x).tobytes() == reference(ops, moe, x).tobytes()


def test_route_ties_go_to_the_lower_expert_id():
    logits = np.array(
        [[1, 1, 1, 1], [0, 2, 2, 1], [3, 1, 1, 1], [1, 2, 1, 2], [0, 0, 5, 0]], dtype=np.float32
    )
    ids, w = route(logits, 2, norm=False)
    assert ids.tolist() == [[0, 1], [1, 2], [0, 1], [1, 3], [2, 0]]
    assert w[0, 0] == w[0, 1] == np.float32(0.25)
    ids3, _ = route(logits, 3, norm=True)
    assert ids3.tolist() == [[0, 1, 2], [1, 2, 3], [0, 1, 2], [1, 3, 0], [2, 0, 1]]


@pytest.mark.parametrize("backend", BACKENDS)
def test_twin_experts_tie_to_the_lower_id_in_the_block(backend):
    """Experts 2 and 5 share router weights: expert 5 is chosen only with 2 ranked first."""
    ops = ops_for(backend)
    t = random_tensors(CFG, 4)
    t[P + "mlp.gate.weight"][5] = t[P + "mlp.gate.weight"][2]
    moe = build_moe(CFG, t, P, ops)
    x = rows(5, 200)
    logits = np.asarray(ops.to_numpy(ops.linear(ops.asarray(x), moe.router)))
    ids, _ = route(logits, 2, True)
    assert (ids == 2).any()
    for pair in ids.tolist():
        if 5 in pair:
            assert pair == [2, 5], pair
    got = run(ops, moe, x)
    assert got.tobytes() == reference(ops, moe, x).tobytes()


def test_route_is_row_local():
    z = np.random.default_rng(3).standard_normal((37, 128)).astype(np.float32)
    ids, w = route(z, 8, norm=True)
    for r in (0, 18, 36):
        i1, w1 = route(z[r : r + 1], 8, norm=True)
        assert ids[r].tolist() == i1[0].tolist() and w[r].tobytes() == w1[0].tobytes()


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_rows_gives_no_rows(backend):
    ops = ops_for(backend)
    assert run(ops, block(ops), np.zeros((0, 64), dtype=np.float32)).shape == (0, 64)


@pytest.mark.gpu
def test_cupy_routing_matches_the_host_and_ties_go_low():
    """cupy's routing kernel: the host's ids (ties to the lower id) on the tie table and on
    random logits; weights within float32 rounding of the host's (exp differs by an ulp)."""
    ops = ops_for("cupy")
    ties = np.array(
        [[1, 1, 1, 1], [0, 2, 2, 1], [3, 1, 1, 1], [1, 2, 1, 2], [0, 0, 5, 0]], dtype=np.float32
    )
    z = np.random.default_rng(8).standard_normal((300, 128)).astype(np.float32)
    for logits, k in ((ties, 2), (ties, 3), (z, 8), (z, 1)):
        for norm in (False, True):
            ids, w = ops.moe_route(ops.asarray(logits), k, norm)
            hids, hw = route(logits, k, norm)
            assert ops.to_numpy(ids).tolist() == hids.tolist(), (k, norm)
            assert np.allclose(ops.to_numpy(w), hw, rtol=1e-5, atol=0), (k, norm)
            one = ops.moe_route(ops.asarray(logits[3:4]), k, norm)
            assert ops.to_numpy(one[1]).tobytes() == ops.to_numpy(w)[3:4].tobytes()
