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
from engine.model.qwen3 import build_layer, decoder_layer


@dataclass
class MtpState:
    area: tuple[Any, int]  # (lane memory, lane)
    next_pos: int = 0  # first position without an MTP row from the target's real state
    pending: np.ndarray | None = None  # target hidden at next_pos, its next token unknown
    logits: np.ndarray | None = None  # MTP logits of the newest real row
    y: np.ndarray | None = None  # MTP output of the newest real row


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
        self.layer = build_layer(cfg, t, "mtp.layers.0.", ops)
        self.fc = ops.prepare_linear(t["mtp.fc.weight"])
        self.norm_e = ops.asarray(t["mtp.pre_fc_norm_embedding.weight"])
        self.norm_h = ops.asarray(t["mtp.pre_fc_norm_hidden.weight"])
        self.norm = ops.asarray(t["mtp.norm.weight"])
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

    def _rows(self, st: MtpState, start: int, hidden: np.ndarray, tokens: list[int]) -> Any:
        """MTP rows at positions start.. from target (or chained) states; returns outputs y."""
        return self._rows_many([(st, start, hidden, tokens)])

    def _rows_many(self, items: list[tuple[MtpState, int, Any, list[int]]]) -> Any:
        """Rows of several streams in one batch; outputs y of all rows, in item order."""
        m, ops = self.model, self.model.ops
        eps = m.config.rms_norm_eps
        tokens = [t for _, _, _, toks in items for t in toks]
        pos = np.concatenate([np.arange(start, start + len(t)) for _, start, _, t in items])
        hidden = ops.concat_rows([ops.asarray(h) for _, _, h, _ in items])
        e = ops.rms_norm(ops.embed(m.embed, np.asarray(tokens)), self.norm_e, eps)
        g = ops.rms_norm(hidden, self.norm_h, eps)
        x = ops.linear(ops.concat_cols([e, g]), self.fc)

        def attend(q: Any, k: Any, v: Any) -> Any:
            asks, a = [], 0
            for st, start, _, toks in items:
                lanes, lane = st.area
                z = a + len(toks)
                lanes.put(0, lane, start, k[a:z], v[a:z])
                asks.append((lanes, (lane, q[a:z], pos[a:z], start + len(toks))))
                a = z
            return ops.concat_rows(attend_lanes(0, asks))

        cos, sin = ops.asarray(m.cos[pos]), ops.asarray(m.sin[pos])
        return decoder_layer(m.config, ops, self.layer, x, cos, sin, attend)

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
        ops = self.model.ops
        y = self._rows_many(work)
        ends = np.cumsum([len(tokens) for *_, tokens in work]) - 1
        last = ops.take_rows(y, ends)
        logits = self._logits_rows(last)
        for j, (st, *_) in enumerate(work):
            st.y = ops.take_rows(last, np.asarray([j]))
            st.logits = logits[j]

    def _logits_rows(self, y: Any) -> np.ndarray:
        ops = self.model.ops
        normed = ops.rms_norm(y, self.norm, self.model.config.rms_norm_eps)
        return ops.to_numpy(ops.linear(normed, self.model.lm_head))

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
            if st is not None and st.logits is not None and st.next_pos == s.fed:
                active.append((s, st))
        drafts = {s.sid: [int(np.argmax(st.logits))] for s, st in active}
        ys = [st.y for _, st in active]
        for i in range(1, k if active else 0):
            items = [
                (st, s.fed + i - 1, ops.to_numpy(y), [drafts[s.sid][-1]])
                for (s, st), y in zip(active, ys, strict=True)
            ]
            y_all = self._rows_many(items)
            logits = self._logits_rows(y_all)
            ys = [ops.take_rows(y_all, np.asarray([j])) for j in range(len(active))]
            for j, (s, _) in enumerate(active):
                drafts[s.sid].append(int(np.argmax(logits[j])))
        return [drafts.get(s.sid, []) for s in streams]
