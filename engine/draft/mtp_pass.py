"""The MTP layer's passes, eager and as the bodies of captured graphs (engine/draft/mtp.py).

A pass turns rows (a token and the hidden state before it, at a position of a stream's lane)
into MTP outputs y and logits. A fixed-shape pass has its rows placed by the lane memory's
`fixed_rows` (padding in a scratch lane) and its inputs named so that several passes fit one
graph: the catch-up pass's placement under the plain names, the chained passes' stacked under
"chain.name" (pass i's at [i]).
Every body runs the eager pass's ops on the same rows, so a row's bits are the eager bits.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.model.graph_shape import padded_rows
from engine.model.layer import decoder_layer


@dataclass(frozen=True)
class MtpWeights:
    """What an MTP pass reads besides its inputs and the lane memory (never the drafter: a
    captured pass must not hold the lanes it is keyed by, engine/ops/cupy_graph.py)."""

    model: Any
    layer: Any
    fc: Any
    norm_e: Any
    norm_h: Any
    norm: Any


# one stream's rows of a pass: (lane, first position, hidden rows [n, H], tokens [n])
Rows = tuple[int, int, Any, list[int]]
Attend = Callable[[Any, Any, Any], Any]
Names = tuple[str, ...]  # the input names of a pass's placement in the lanes


def pass_rows(w: MtpWeights, dev: dict[str, Any], attend: Attend) -> Any:
    """The MTP layer's outputs y of rows dev["ids"] (tokens) over dev["hidden"] (states)."""
    m, ops = w.model, w.model.ops
    eps = m.config.rms_norm_eps
    eg = ops.embed_norm_concat(m.embed, dev["ids"], dev["hidden"], w.norm_e, w.norm_h, eps)
    if eg is None:
        e = ops.rms_norm(ops.embed(m.embed, dev["ids"]), w.norm_e, eps)
        eg = ops.concat_cols([e, ops.rms_norm(dev["hidden"], w.norm_h, eps)])
    x = ops.linear(eg, w.fc)
    return decoder_layer(m.config, ops, w.layer, x, dev["cos"], dev["sin"], attend)


def pass_logits(w: MtpWeights, y: Any) -> Any:
    ops = w.model.ops
    return ops.linear(ops.rms_norm(y, w.norm, w.model.config.rms_norm_eps), w.model.lm_head)


def catch_up_inputs(
    w: MtpWeights, lanes: Any, items: list[Rows], rows: int
) -> dict[str, np.ndarray] | None:
    """Host inputs of a fixed-shape pass of `rows` rows over the items' rows, "need" holding
    each item's last row (padded to a tile); None where the lanes cannot place them."""
    placed = lanes.fixed_rows([(lane, start, len(t)) for lane, start, _, t in items], rows)
    if placed is None:
        return None
    m = w.model
    pos = np.zeros(rows, dtype=np.int64)
    ids = np.zeros(rows, dtype=np.int64)
    hidden = np.zeros((rows, m.config.hidden_size), dtype=np.float32)
    ends, a = [], 0
    for _, start, h, toks in items:
        z = a + len(toks)
        pos[a:z], ids[a:z], hidden[a:z] = np.arange(start, start + len(toks)), toks, h
        ends.append(z - 1)
        a = z
    need = padded_rows(np.asarray(ends, dtype=np.int64), m.ops.row_tile)
    return {"ids": ids, "hidden": hidden, "cos": m.cos[pos], "sin": m.sin[pos], "need": need,
            **placed}  # fmt: skip


def chain_inputs(
    w: MtpWeights, lanes: Any, starts: list[tuple[int, int]], steps: int, rows: int
) -> tuple[dict[str, np.ndarray], tuple[str, ...]] | None:
    """Host inputs of `steps` chained one-row passes of the streams at (lane, position of
    the first pass), `rows` rows each, and the names of a pass's placement: each name's
    arrays of every pass stacked under "chain.name" (pass i's at [i]), cos and sin under
    "chain.cos" and "chain.sin" (few arrays: one staging copy each). None where the lanes
    cannot place them."""
    m, placed_all, names = w.model, [], ()
    pos = np.zeros((steps, rows), dtype=np.int64)
    for i in range(steps):
        placed = lanes.fixed_rows([(lane, p + i, 1) for lane, p in starts], rows)
        if placed is None:
            return None
        names = tuple(placed)
        placed_all.append(placed)
        pos[i, : len(starts)] = [p + i for _, p in starts]
    inputs = {f"chain.{n}": np.stack([pl[n] for pl in placed_all]) for n in names}
    inputs.update({"chain.cos": m.cos[pos], "chain.sin": m.sin[pos]})
    return inputs, names


def fixed_pass(w: MtpWeights, lanes: Any, dev: dict[str, Any]) -> tuple[Any, Any]:
    """A catch-up pass over placed rows (a graph's body): logits and outputs of dev["need"]."""
    y = pass_rows(w, dev, lanes.fixed_attend(0, dev))
    last = y[dev["need"]]
    return pass_logits(w, last), last


def fixed_chain(
    w: MtpWeights, lanes: Any, dev: dict[str, Any], start: tuple[Any, Any], names: Names
) -> list[Any]:
    """Chained one-row passes from (tokens, states) `start` (device rows): pass i's rows
    placed by dev["chain.name"][i] for each of `names`, its greedy tokens picked on the
    device and embedded by the next; the tokens of every pass."""
    ops = w.model.ops
    ids, hidden = start
    picked = []
    for i in range(dev["chain.cos"].shape[0]):
        placed = {name: dev[f"chain.{name}"][i] for name in names}
        d = {"ids": ids, "hidden": hidden, "cos": dev["chain.cos"][i], "sin": dev["chain.sin"][i]}
        hidden = pass_rows(w, d, lanes.fixed_attend(0, placed))
        ids = ops.greedy_ids(pass_logits(w, hidden))
        picked.append(ids)
    return picked


def token_columns(ops: Any, tokens: list[Any]) -> Any:
    """Token rows [rows] side by side as [rows, len(tokens)]: one output, one copy back."""
    return ops.concat_cols([t.reshape(-1, 1) for t in tokens])


def fixed_catch_up_chain(
    w: MtpWeights, lanes: Any, dev: dict[str, Any], names: Names
) -> tuple[Any, Any]:
    """A catch-up pass and the chained passes after it in one body: each stream's tokens
    [rows, 1 + passes] (its greedy token after its last caught-up row, then each chained
    pass's), and that row's output y."""
    logits, last = fixed_pass(w, lanes, dev)
    first = w.model.ops.greedy_ids(logits)
    picked = fixed_chain(w, lanes, dev, (first, last), names)
    return token_columns(w.model.ops, [first, *picked]), last
