"""The block drafter's proposal as a captured graph (engine/draft/block.py).

A proposal's rows are each active stream's block: its first token's embedding, then the mask
embedding b - 1 times, at positions fed.. of its lane, every row seeing the whole block
(non-causal) and the context before it. Here those rows run at a fixed shape placed by the
lane memory's `fixed_rows` (padding rows, mask embeddings, in its scratch lane), the K/V
written through each layer's `fixed_attend`, and the drafts picked on the device. The body
runs the eager proposal's ops on the same rows, and every op is row-invariant, so a draft and
every lane byte are the eager ones (tests/engine/test_cupy_drafter_graph.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.model.graph_shape import padded_rows, step_rows
from engine.model.layer import decoder_layer

# one active stream: (lane, position of its block's first row, that row's token)
Start = tuple[int, int, int]


@dataclass(frozen=True)
class BlockWeights:
    """What a proposal's body reads (never the drafter: a captured body must not hold the
    lanes its graph is keyed by, engine/ops/cupy_graph.py)."""

    model: Any
    cfg: Any
    layers: list[Any]
    mask: Any
    norm: Any
    block_size: int


def propose_graph(
    w: BlockWeights,
    lanes: Any,
    rope: tuple[np.ndarray, np.ndarray],
    starts: list[Start],
    drafts: int,
) -> list[list[int]] | None:
    """`drafts` greedy tokens after each stream's first token, through the graph of this
    shape (rows, streams, drafts) over `lanes`, or None where the backend takes no graph.
    rope: the drafter's cos and sin tables."""
    ops, b = w.model.ops, w.block_size
    if not ops.graph_rows or not hasattr(ops, "greedy_ids") or not hasattr(lanes, "fixed_rows"):
        return None
    n = len(starts)
    rows = step_rows(n * b, ops.row_tile, ops.graph_rows)
    if rows is None or drafts < 1:
        return None
    placed = lanes.fixed_rows([(lane, fed, b) for lane, fed, _ in starts], rows, causal=False)
    if placed is None:
        return None
    pos = np.zeros(rows, dtype=np.int64)
    for j, (_, fed, _) in enumerate(starts):
        pos[j * b : (j + 1) * b] = np.arange(fed, fed + b)
    need = np.concatenate([j * b + np.arange(1, 1 + drafts) for j in range(n)])
    inputs = {
        "ids": np.asarray([t for *_, t in starts], dtype=np.int64),
        "cos": rope[0][pos],
        "sin": rope[1][pos],
        "need": padded_rows(need, ops.row_tile),
        **placed,
    }

    def body(own: Any, dev: dict[str, Any]) -> tuple[Any, ...]:
        return (block_tokens(w, own, dev, n, rows),)

    out = ops.run_graph(lanes, ("block", rows, n, drafts), inputs, body, np.arange(len(need)))
    if out is None:
        return None
    tokens = np.asarray(out[0]).reshape(n, drafts)
    return [[int(t) for t in row] for row in tokens]


def block_tokens(w: BlockWeights, lanes: Any, dev: dict[str, Any], n: int, rows: int) -> Any:
    """The body: n blocks of rows (and mask rows up to `rows`) through the drafter's layers,
    then the greedy token of each row in dev["need"]."""
    ops, m, b, cfg = w.model.ops, w.model, w.block_size, w.cfg
    first = ops.embed(m.embed, dev["ids"])
    parts = [r for j in range(n) for r in (first[j : j + 1], *[w.mask] * (b - 1))]
    x = ops.concat_rows(parts + [w.mask] * (rows - n * b))
    for li, layer in enumerate(w.layers):
        x = decoder_layer(cfg, ops, layer, x, dev["cos"], dev["sin"], lanes.fixed_attend(li, dev))
    y = ops.rms_norm(x[dev["need"]], w.norm, cfg.rms_norm_eps)
    return ops.greedy_ids(ops.linear(y, m.lm_head))
