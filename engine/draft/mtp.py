"""The MTP drafter (docs/drafters.md): one extra decoder layer over the normed embedding
of the next token joined with the target's last hidden state, sharing embedding and head.

Per stream, in its lane of the backend's lane memory: the MTP layer's K/V rows; in its
state, the target hidden state of the newest row whose next token is not known yet. Rows
are recomputed from the target's real hidden states after each verification, overwriting
speculative rows. The streams of a round draft together: each chained draft position is
one batch of rows (a row's bits do not depend on its neighbours), with attention per lane.

Where the backend captures graphs (engine/draft/mtp_pass.py), a round's verified rows wait in
their state (`todo`) until the next proposal, which runs them and every chained draft
position in one graph, the tokens picked on the device: one launch a round, not one a pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.draft import mtp_pass
from engine.draft.lifecycle import LaneDrafter, attend_lanes
from engine.draft.mtp_pass import MtpWeights, Rows
from engine.errors import InputError
from engine.model.graph_shape import step_rows
from engine.model.qwen3 import build_layer


@dataclass
class MtpState:
    area: tuple[Any, int]  # (lane memory, lane)
    next_pos: int = 0  # first position without an MTP row from the target's real state
    pending: np.ndarray | None = None  # target hidden at next_pos, its next token unknown
    draft: int | None = None  # the MTP's greedy token after the newest real row
    y: Any = None  # MTP output of the newest real row [1, H]
    todo: Rows | None = None  # verified rows not run yet (they run before the next draft)


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

    # ---- passes -----------------------------------------------------------------------
    def _graphs(self) -> bool:
        """Whether this drafter's passes can be captured graphs: the backend captures them
        and picks tokens on the device, the lanes place fixed-shape rows, and the backend's
        graphs take the layer."""
        ops, moe = self.model.ops, self.w.layer.moe
        if not ops.graph_rows or not hasattr(ops, "greedy_ids"):
            return False
        if moe is not None and not ops.moe_in_graph(moe):
            return False
        return hasattr(self.lanes, "fixed_rows")

    def _run(self, states: list[MtpState]) -> None:
        """Run the waiting rows of those states that have some in one pass: each such state's
        y and draft after them."""
        work = [st for st in states if st.todo is not None]
        if not work:
            return
        items = [st.todo for st in work if st.todo is not None]  # every one: typed for mypy
        out = self._pass_graph(items, work) if self._graphs() else None
        ys, drafts = out if out is not None else self._pass(items, work)
        for st, y, d in zip(work, ys, drafts, strict=True):
            st.y, st.draft, st.todo = y, d, None

    def _pass(self, items: list[Rows], states: list[MtpState]) -> tuple[list[Any], list[int]]:
        """The eager pass: per item, the output y [1, H] of its last row and the greedy
        token after it."""
        ops, m = self.model.ops, self.model
        pos = np.concatenate([np.arange(start, start + len(t)) for _, start, _, t in items])
        hidden = ops.concat_rows([ops.asarray(h) for _, _, h, _ in items])

        def attend(q: Any, k: Any, v: Any) -> Any:
            asks, a = [], 0
            for st, (lane, start, _, toks) in zip(states, items, strict=True):
                z = a + len(toks)
                st.area[0].put(0, lane, start, k[a:z], v[a:z])
                asks.append((st.area[0], (lane, q[a:z], pos[a:z], start + len(toks))))
                a = z
            return ops.concat_rows(attend_lanes(0, asks))

        tokens = np.asarray([t for *_, toks in items for t in toks])
        cos, sin = ops.asarray(m.cos[pos]), ops.asarray(m.sin[pos])
        dev = {"ids": tokens, "hidden": hidden, "cos": cos, "sin": sin}
        y = mtp_pass.pass_rows(self.w, dev, attend)
        last = ops.take_rows(y, np.cumsum([len(toks) for *_, toks in items]) - 1)
        logits = ops.to_numpy(mtp_pass.pass_logits(self.w, last))
        ys = [ops.take_rows(last, np.asarray([j])) for j in range(len(items))]
        return ys, [int(np.argmax(row)) for row in logits]

    def _pass_graph(
        self, items: list[Rows], states: list[MtpState]
    ) -> tuple[list[Any], list[int]] | None:
        """`_pass` as one captured graph (every state in this drafter's lanes), or None."""
        ops, lanes = self.model.ops, self.lanes
        rows = step_rows(sum(len(t) for *_, t in items), ops.row_tile, ops.graph_rows)
        if rows is None or any(st.area[0] is not lanes for st in states):
            return None
        inputs = mtp_pass.catch_up_inputs(self.w, lanes, items, rows)
        if inputs is None:
            return None
        w, got = self.w, np.arange(len(items))
        key = ("mtp", rows, len(inputs["need"]))
        out = ops.run_graph(lanes, key, inputs, lambda o, d: mtp_pass.fixed_pass(w, o, d), got)
        if out is None:
            return None
        logits, last = out
        picks = getattr(logits, "greedy", None)
        drafts = picks()[0] if picks is not None else np.argmax(np.asarray(logits), axis=-1)
        return [last[j : j + 1] for j in range(len(items))], [int(t) for t in drafts]

    # ---- absorbing verified rows --------------------------------------------------------
    def _catch_up_many(self, items: list[tuple[Any, MtpState, int, Any]], wait: bool) -> None:
        """Add target rows start.. of each stream; every row whose next token is known
        becomes its state's `todo`, run now (in one batch) or, with `wait`, before the
        stream's next draft."""
        self._run([st for _, st, *_ in items])  # one todo at a time
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
                st.todo = (st.area[1], first, np.stack(rows[:take]), tokens)
                work.append(st)
                st.next_pos = first + take
            st.pending = rows[take] if take < len(rows) else None
        if not wait:
            self._run(work)

    def absorb_prompt(self, stream: Any, segment: Any, out: Any) -> None:
        st = self.states.get(stream.sid)
        if st is not None:
            self._catch_up_many([(stream, st, out.start, out.taps[self.taps[0]])], wait=False)

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
        self._catch_up_many(batch, wait=self._graphs())

    # ---- proposing ----------------------------------------------------------------------
    def propose(self, stream: Any, k: int) -> list[int]:
        return self.propose_many([stream], k)[0]

    def propose_many(self, streams: list[Any], k: int) -> list[list[int]]:
        active = []
        for s in streams:
            st = self.states.get(s.sid)
            ready = st is not None and (st.draft is not None or st.todo is not None)
            if ready and st.next_pos == s.fed:
                active.append((s, st))
        fused = self._fused_graph(active, k - 1) if active and k > 1 else None
        if fused is not None:
            return self._drafts(streams, active, fused)
        self._run([st for _, st in active])
        chained = self._chain_graph(active, k - 1) if active and k > 1 else None
        if chained is None:
            chained = self._chain_eager(active, k - 1)
        return self._drafts(
            streams,
            active,
            [[st.draft, *more] for (_, st), more in zip(active, chained, strict=True)],
        )

    @staticmethod
    def _drafts(streams: list[Any], active: list[Active], got: list[list[int]]) -> list[list[int]]:
        by_sid = {s.sid: d for (s, _), d in zip(active, got, strict=True)}
        return [by_sid.get(s.sid, []) for s in streams]

    def _chain_eager(self, active: list[Active], steps: int) -> list[list[int]]:
        ops, more = self.model.ops, [[] for _ in active]
        ys, toks = [st.y for _, st in active], [st.draft for _, st in active]
        for i in range(steps):
            items = [(st.area[1], s.fed + i, ops.to_numpy(y), [t])
                     for (s, st), y, t in zip(active, ys, toks, strict=True)]  # fmt: skip
            ys, toks = self._pass(items, [st for _, st in active])
            for j, t in enumerate(toks):
                more[j].append(t)
        return more

    def _chain_graph(self, active: list[Active], steps: int) -> list[list[int]] | None:
        """Draft positions 1..steps of every active stream as one captured graph (each
        position's tokens picked on the device and embedded for the next); None where the
        backend takes no graph."""
        ops, lanes, m = self.model.ops, self.lanes, self.model
        rows = step_rows(len(active), ops.row_tile, ops.graph_rows)
        if rows is None or not self._graphs() or any(st.area[0] is not lanes for _, st in active):
            return None
        chain = mtp_pass.chain_inputs(
            self.w, lanes, [(st.area[1], s.fed) for s, st in active], steps, rows
        )
        if chain is None:
            return None
        inputs, names = chain
        ids = np.zeros(rows, dtype=np.int64)
        hidden = np.zeros((rows, m.config.hidden_size), dtype=np.float32)
        for j, (_, st) in enumerate(active):
            ids[j], hidden[j] = st.draft, ops.to_numpy(st.y)[0]
        inputs.update({"ids": ids, "hidden": hidden})
        w = self.w

        def body(own: Any, dev: dict[str, Any]) -> tuple[Any, ...]:
            picked = mtp_pass.fixed_chain(w, own, dev, (dev["ids"], dev["hidden"]), names)
            return (mtp_pass.token_columns(ops, picked),)

        out = ops.run_graph(lanes, ("mtp-chain", rows, steps), inputs, body, np.arange(len(active)))
        if out is None:
            return None
        return [[int(t) for t in row] for row in out[0]]

    def _fused_graph(self, active: list[Active], steps: int) -> list[list[int]] | None:
        """The waiting rows of every active stream and its draft positions 0..steps in one
        captured graph; None unless every active stream has rows waiting and the backend
        takes the graph."""
        ops, lanes = self.model.ops, self.lanes
        if not self._graphs() or any(
            st.todo is None or st.area[0] is not lanes for _, st in active
        ):
            return None
        items = [st.todo for _, st in active]
        rows = step_rows(sum(len(t) for *_, t in items), ops.row_tile, ops.graph_rows)
        if rows is None:
            return None
        inputs = mtp_pass.catch_up_inputs(self.w, lanes, items, rows)
        if inputs is None:
            return None
        starts = [(st.area[1], s.fed) for s, st in active]
        chain = mtp_pass.chain_inputs(self.w, lanes, starts, steps, len(inputs["need"]))
        if chain is None:
            return None
        inputs.update(chain[0])
        w, names = self.w, chain[1]

        def body(own: Any, dev: dict[str, Any]) -> tuple[Any, ...]:
            return mtp_pass.fixed_catch_up_chain(w, own, dev, names)

        key = ("mtp-fused", rows, len(inputs["need"]), steps)
        out = ops.run_graph(lanes, key, inputs, body, np.arange(len(active)))
        if out is None:
            return None
        tokens, last = out
        for j, (_, st) in enumerate(active):
            st.y, st.draft, st.todo = last[j : j + 1], int(tokens[j, 0]), None
        return [[int(t) for t in row] for row in tokens]
