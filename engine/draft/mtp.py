"""The MTP drafter (docs/drafters.md): one extra decoder layer over the normed embedding
of the next token joined with the target's last hidden state, sharing embedding and head.

Per stream, in its lane of the backend's lane memory: the MTP layer's K/V rows; in its
state, the target hidden state of the newest row whose next token is not known yet. Rows
are recomputed from the target's real hidden states after each verification, overwriting
speculative rows. The streams of a round draft together: each chained draft position is
one batch of rows (a row's bits do not depend on its neighbours), with attention per lane.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.draft.lifecycle import LaneDrafter, attend_lanes
from engine.errors import InputError
from engine.model.graph_shape import padded_rows, step_rows
from engine.model.qwen3 import build_layer, decoder_layer


@dataclass
class MtpState:
    area: tuple[Any, int]  # (lane memory, lane)
    next_pos: int = 0  # first position without an MTP row from the target's real state
    pending: np.ndarray | None = None  # target hidden at next_pos, its next token unknown
    draft: int | None = None  # the MTP's greedy token after the newest real row
    y: Any = None  # MTP output of the newest real row [1, H]


@dataclass(frozen=True)
class MtpWeights:
    """What an MTP pass reads besides its inputs and the lane memory (never the drafter: a
    captured pass must not hold the lanes it is keyed by, cupy_graph.py)."""

    model: Any
    layer: Any
    fc: Any
    norm_e: Any
    norm_h: Any
    norm: Any


Item = tuple[MtpState, int, Any, list[int]]  # (state, first position, hidden rows, tokens)
Active = tuple[Any, MtpState]  # (stream, its state)


class MtpDrafter(LaneDrafter):
    def __init__(self, model: Any) -> None:
        super().__init__()
        cfg, ops, t = model.config, model.ops, model.extra
        need = [
            "mtp.fc.weight",
            "mtp.pre_fc_norm_embedding.weight",
            "mtp.pre_fc_norm_hidden.weight",
            "mtp.norm.weight",
        ]
        missing = [n for n in need if n not in t]
        if missing:
            raise InputError(f"--drafter mtp: the checkpoint has no '{missing[0]}' (no MTP head)")
        self.model = model
        self.w = MtpWeights(
            model=model,
            layer=build_layer(cfg, t, "mtp.layers.0.", ops),
            fc=ops.prepare_linear(t["mtp.fc.weight"]),
            norm_e=ops.asarray(t["mtp.pre_fc_norm_embedding.weight"]),
            norm_h=ops.asarray(t["mtp.pre_fc_norm_hidden.weight"]),
            norm=ops.asarray(t["mtp.norm.weight"]),
        )
        self.taps = (cfg.num_layers - 1,)
        self.rows = 0

    @classmethod
    def from_config(cls, cfg: Any, model: Any) -> MtpDrafter:
        if not hasattr(model, "extra"):
            raise InputError("--drafter mtp: this backend's model has no MTP weights")
        return cls(model)

    def plan(self, plan: Any, model: Any) -> None:
        self.rows = plan.context
        super().plan(plan, model)

    def make_lanes(self, count: int) -> Any:
        c = self.model.config
        return self.model.ops.new_lanes(1, count, self.rows, c.num_kv_heads, c.head_dim)

    def new_state(self, stream: Any, area: tuple[Any, int]) -> MtpState:
        # rows before the first step (a reused prefix) get no MTP rows: zero them so a
        # lane's earlier stream leaves nothing behind
        lanes, lane = area
        lanes.zero(lane, stream.fed)
        return MtpState(area=area, next_pos=stream.fed)

    def _pass(self, items: list[Item]) -> tuple[list[Any], list[int]]:
        """MTP rows at positions start.. of each item from target (or chained) states, in
        one batch: per item, the output y [1, H] of its last row and the greedy token after
        it. Through the backend's captured graphs where it has them (the same bits)."""
        fixed = self._pass_graph(items)
        if fixed is not None:
            return fixed
        ops = self.model.ops
        tokens = [t for _, _, _, toks in items for t in toks]
        pos = np.concatenate([np.arange(start, start + len(t)) for _, start, _, t in items])
        hidden = ops.concat_rows([ops.asarray(h) for _, _, h, _ in items])

        def attend(q: Any, k: Any, v: Any) -> Any:
            asks, a = [], 0
            for st, start, _, toks in items:
                lanes, lane = st.area
                z = a + len(toks)
                lanes.put(0, lane, start, k[a:z], v[a:z])
                asks.append((lanes, (lane, q[a:z], pos[a:z], start + len(toks))))
                a = z
            return ops.concat_rows(attend_lanes(0, asks))

        m = self.model
        cos, sin = ops.asarray(m.cos[pos]), ops.asarray(m.sin[pos])
        dev = {"ids": np.asarray(tokens), "hidden": hidden, "cos": cos, "sin": sin}
        y = _rows(self.w, dev, attend)
        last = ops.take_rows(y, np.cumsum([len(toks) for *_, toks in items]) - 1)
        logits = ops.to_numpy(_logits(self.w, last))
        ys = [ops.take_rows(last, np.asarray([j])) for j in range(len(items))]
        return ys, [int(np.argmax(row)) for row in logits]

    def _pass_graph(self, items: list[Item]) -> tuple[list[Any], list[int]] | None:
        """`_pass` as one fixed-shape step through `ops.run_graph`, or None where the backend
        or the lane memory takes none (every item must be in this drafter's lanes)."""
        ops, lanes = self.model.ops, self.lanes
        total = sum(len(toks) for *_, toks in items)
        rows = step_rows(total, ops.row_tile, ops.graph_rows)
        if rows is None or not self._in_graph([(None, st) for st, *_ in items]):
            return None
        placed = lanes.fixed_rows([(st.area[1], start, len(t)) for st, start, _, t in items], rows)
        if placed is None:
            return None
        pos = np.zeros(rows, dtype=np.int64)
        ids = np.zeros(rows, dtype=np.int64)
        hidden = np.zeros((rows, self.model.config.hidden_size), dtype=np.float32)
        ends, a = [], 0
        for _, start, h, toks in items:
            z = a + len(toks)
            pos[a:z], ids[a:z], hidden[a:z] = np.arange(start, start + len(toks)), toks, h
            ends.append(z - 1)
            a = z
        m = self.model
        need = padded_rows(np.asarray(ends, dtype=np.int64), ops.row_tile)
        inputs = {"ids": ids, "hidden": hidden, "cos": m.cos[pos], "sin": m.sin[pos], "need": need}
        inputs.update(placed)
        key = ("mtp", rows, len(inputs["need"]))
        w = self.w
        got = np.arange(len(items))
        out = ops.run_graph(lanes, key, inputs, lambda own, dev: _fixed_pass(w, own, dev), got)
        if out is None:
            return None
        logits, last = out
        picks = getattr(logits, "greedy", None)
        drafts = picks()[0] if picks is not None else np.argmax(np.asarray(logits), axis=-1)
        return [last[j : j + 1] for j in range(len(items))], [int(t) for t in drafts]

    def _catch_up(self, stream: Any, st: MtpState, start: int, hidden: np.ndarray) -> None:
        self._catch_up_many([(stream, st, start, hidden)])

    def _catch_up_many(self, items: list[tuple[Any, MtpState, int, np.ndarray]]) -> None:
        """Add target rows start.. of each stream and compute, in one batch, every row
        whose next token is known."""
        work = []
        for stream, st, start, hidden in items:
            first = st.next_pos
            if st.pending is not None:
                rows = [st.pending, *hidden[first + 1 - start :]]
            else:
                rows = list(hidden[first - start :])
            known = len(stream.tokens) - 1 - first  # rows q with t_{q+1} known
            take = min(len(rows), known)
            if take > 0:
                tokens = stream.tokens[first + 1 : first + 1 + take]
                work.append((st, first, np.stack(rows[:take]), tokens))
                st.next_pos = first + take
            st.pending = rows[take] if take < len(rows) else None
        if not work:
            return
        ys, drafts = self._pass(work)
        for (st, *_), y, d in zip(work, ys, drafts, strict=True):
            st.y, st.draft = y, d

    def absorb_prompt(self, stream: Any, segment: Any, out: Any) -> None:
        st = self.states.get(stream.sid)
        if st is not None:
            self._catch_up(stream, st, out.start, out.taps[self.taps[0]])

    def absorb(self, stream: Any, out: Any, accepted: int, emitted: list[int]) -> None:
        self.absorb_many([(stream, out, accepted, emitted)])

    def absorb_many(self, items: list[tuple[Any, Any, int, list[int]]]) -> None:
        batch = []
        for stream, out, accepted, _ in items:
            st = self.states.get(stream.sid)
            if st is None:
                continue
            if st.pending is not None:  # the prompt's last row; its rows were absorbed already
                batch.append((stream, st, out.start, np.zeros((0,))))
            else:  # a round: the pending token's row and the accepted drafts' rows
                batch.append((stream, st, out.start, out.taps[self.taps[0]][: accepted + 1]))
        self._catch_up_many(batch)

    def propose(self, stream: Any, k: int) -> list[int]:
        return self.propose_many([stream], k)[0]

    def propose_many(self, streams: list[Any], k: int) -> list[list[int]]:
        ops = self.model.ops
        active = []
        for s in streams:
            st = self.states.get(s.sid)
            if st is not None and st.draft is not None and st.next_pos == s.fed:
                active.append((s, st))
        drafts = {s.sid: [st.draft] for s, st in active}
        chained = self._chain_graph(active, k - 1) if active and k > 1 else None
        if chained is not None:
            for (s, _), more in zip(active, chained, strict=True):
                drafts[s.sid].extend(more)
            return [drafts.get(s.sid, []) for s in streams]
        ys = [st.y for _, st in active]
        for i in range(1, k if active else 0):
            items = [
                (st, s.fed + i - 1, ops.to_numpy(y), [drafts[s.sid][-1]])
                for (s, st), y in zip(active, ys, strict=True)
            ]
            ys, picks = self._pass(items)
            for (s, _), tok in zip(active, picks, strict=True):
                drafts[s.sid].append(tok)
        return [drafts.get(s.sid, []) for s in streams]

    def _chain_graph(
        self, active: list[tuple[Any, MtpState]], steps: int
    ) -> list[list[int]] | None:
        """The chained draft positions 1..steps of every active stream as one captured graph:
        each position's greedy tokens are picked on the device and embedded for the next, so
        a proposal costs one launch, not one pass a position. The eager chain's bits (each
        position is `_pass` of one row a stream); None where the backend takes no graph."""
        ops, lanes, m = self.model.ops, self.lanes, self.model
        rows = step_rows(len(active), ops.row_tile, ops.graph_rows)
        if rows is None or not hasattr(ops, "greedy_ids") or not self._in_graph(active):
            return None
        ids = np.zeros(rows, dtype=np.int64)
        hidden = np.zeros((rows, m.config.hidden_size), dtype=np.float32)
        for j, (_, st) in enumerate(active):
            ids[j], hidden[j] = st.draft, ops.to_numpy(st.y)[0]
        inputs = {"ids": ids, "hidden": hidden}
        for i in range(steps):
            pos = np.zeros(rows, dtype=np.int64)
            pos[: len(active)] = [s.fed + i for s, _ in active]
            placed = lanes.fixed_rows([(st.area[1], s.fed + i, 1) for s, st in active], rows)
            if placed is None:
                return None
            inputs.update({f"{name}.{i}": a for name, a in placed.items()})
            inputs.update({f"cos.{i}": m.cos[pos], f"sin.{i}": m.sin[pos]})
        w, names = self.w, tuple(placed)
        got = np.arange(len(active))

        def body(own: Any, dev: dict[str, Any]) -> tuple[Any, ...]:
            return _fixed_chain(w, own, dev, steps, names)

        out = ops.run_graph(lanes, ("mtp-chain", rows, steps), inputs, body, got)
        if out is None:
            return None
        return [[int(col[j]) for col in out] for j in range(len(active))]

    def _in_graph(self, states: list[Active]) -> bool:
        """Whether a pass over these streams can be a captured graph: their MTP rows are in
        this drafter's lanes, which place fixed-shape steps, and the layer is one the
        backend's graphs take."""
        moe = self.w.layer.moe
        if moe is not None and not self.model.ops.moe_in_graph(moe):
            return False
        lanes = self.lanes
        return hasattr(lanes, "fixed_rows") and all(st.area[0] is lanes for _, st in states)


def _rows(w: MtpWeights, dev: dict[str, Any], attend: Any) -> Any:
    """The MTP layer's outputs y of rows dev["ids"] (tokens) over dev["hidden"] (states)."""
    m, ops = w.model, w.model.ops
    eps = m.config.rms_norm_eps
    e = ops.rms_norm(ops.embed(m.embed, dev["ids"]), w.norm_e, eps)
    g = ops.rms_norm(dev["hidden"], w.norm_h, eps)
    x = ops.linear(ops.concat_cols([e, g]), w.fc)
    return decoder_layer(m.config, ops, w.layer, x, dev["cos"], dev["sin"], attend)


def _logits(w: MtpWeights, y: Any) -> Any:
    ops = w.model.ops
    return ops.linear(ops.rms_norm(y, w.norm, w.model.config.rms_norm_eps), w.model.lm_head)


def _fixed_pass(w: MtpWeights, lanes: Any, dev: dict[str, Any]) -> tuple[Any, Any]:
    """A pass over rows placed by `lanes.fixed_rows` (a captured graph's body): the logits and
    outputs of the rows dev["need"]."""
    y = _rows(w, dev, lambda q, k, v: lanes.store_attend_fixed(0, dev, q, k, v))
    last = y[dev["need"]]
    return _logits(w, last), last


def _fixed_chain(
    w: MtpWeights, lanes: Any, dev: dict[str, Any], steps: int, names: tuple[str, ...]
) -> tuple[Any, ...]:
    """Chained one-row passes (a captured graph's body): pass i reads the previous pass's
    outputs and greedy tokens, its rows placed by dev[name.i]; the tokens of every pass."""
    ops = w.model.ops
    ids, hidden, picked = dev["ids"], dev["hidden"], []
    for i in range(steps):
        placed = {name: dev[f"{name}.{i}"] for name in names}
        d = {"ids": ids, "hidden": hidden, "cos": dev[f"cos.{i}"], "sin": dev[f"sin.{i}"]}

        def attend(q: Any, k: Any, v: Any, placed: dict[str, Any] = placed) -> Any:
            return lanes.store_attend_fixed(0, placed, q, k, v)

        hidden = _rows(w, d, attend)
        ids = ops.greedy_ids(_logits(w, hidden))
        picked.append(ids)
    return tuple(picked)
