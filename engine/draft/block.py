"""The block drafter (docs/drafters.md): reads the target's hidden states at a few layers
and drafts a whole block in one non-causal pass. Loaded from its own directory.

Per stream, in its lane of the backend's lane memory: each drafter layer's K/V of the
context rows, computed from the target's taps as rows are verified. A proposal writes its
block's K/V after the context (rows that later context overwrites) and attends over both.
The streams of a round draft together, one batch of rows, attention per lane.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from engine.draft import block_pass
from engine.draft.lifecycle import LaneDrafter, attend_lanes
from engine.errors import InputError
from engine.model.layer import decoder_layer, project_qkv
from engine.model.qwen3 import build_layer, rope_tables
from engine.model.weights import load_tensors


@dataclass
class BlockState:
    area: tuple[Any, int]  # (lane memory, lane)
    context: int = 0  # context rows absorbed


class BlockDrafter(LaneDrafter):
    def __init__(self, model: Any, drafter_dir: str) -> None:
        super().__init__()
        path = Path(drafter_dir) / "config.json"
        if not path.is_file():
            raise InputError(f"--drafter-model {drafter_dir}: no config.json")
        try:
            raw = json.loads(path.read_text())
            target_layers = tuple(int(i) for i in raw["target_layers"])
            self.block_size = int(raw["block_size"])
            cfg = replace(
                model.config,
                hidden_size=int(raw["hidden_size"]),
                intermediate_size=int(raw["intermediate_size"]),
                num_layers=int(raw["num_hidden_layers"]),
                num_heads=int(raw["num_attention_heads"]),
                num_kv_heads=int(raw["num_key_value_heads"]),
                head_dim=int(raw["head_dim"]),
                rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
                rope_theta=float(raw.get("rope_theta", model.config.rope_theta)),
                quantization=None,
            )
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise InputError(f"{path}: missing or bad key ({exc})") from None
        if cfg.hidden_size != model.config.hidden_size:
            raise InputError(f"{path}: hidden_size must equal the target's")
        if not all(0 <= i < model.config.num_layers for i in target_layers):
            raise InputError(f"{path}: target_layers {list(target_layers)} out of range")
        t = load_tensors(drafter_dir, cfg)
        ops = model.ops
        for name in ("fc.weight", "hidden_norm.weight", "mask_embedding", "norm.weight"):
            if name not in t:
                raise InputError(f"--drafter-model {drafter_dir}: missing tensor '{name}'")
        self.model, self.cfg, self.taps = model, cfg, target_layers
        self.layers = [build_layer(cfg, t, f"layers.{i}.", ops) for i in range(cfg.num_layers)]
        self.fc = ops.prepare_linear(t["fc.weight"])
        self.hidden_norm = ops.asarray(t["hidden_norm.weight"])
        self.mask = ops.asarray(t["mask_embedding"].reshape(1, -1))
        self.norm = ops.asarray(t["norm.weight"])
        self.cos, self.sin = rope_tables(cfg)
        self.rows = 0

    @classmethod
    def from_config(cls, cfg: Any, model: Any) -> BlockDrafter:
        if not cfg.drafter_model:
            raise InputError("--drafter block: needs --drafter-model DIR")
        return cls(model, cfg.drafter_model)

    def max_tokens(self, k: int) -> int:
        return min(k, self.block_size - 1)

    def plan(self, plan: Any, model: Any) -> None:
        self.rows = plan.context
        super().plan(plan, model)

    def make_lanes(self, count: int) -> Any:
        c = self.cfg
        rows = self.rows + self.block_size  # a block is drafted after the context
        return self.model.ops.new_lanes(c.num_layers, count, rows, c.num_kv_heads, c.head_dim)

    def new_state(self, stream: Any, area: tuple[Any, int]) -> BlockState:
        lanes, lane = area
        lanes.zero(lane, stream.fed)  # a reused prefix has no context rows
        return BlockState(area=area, context=stream.fed)

    def _add_context(self, st: BlockState, start: int, taps: dict[int, np.ndarray], n: int) -> None:
        self._add_context_many([(st, start, taps, n)])

    def _add_context_many(self, items: list[tuple[BlockState, int, dict, int]]) -> None:
        """Context rows of several streams in one batch of rows, stored per lane."""
        if not items:
            return
        ops, eps = self.model.ops, self.cfg.rms_norm_eps
        feats = ops.concat_rows(
            [ops.concat_cols([ops.asarray(t[i][:n]) for i in self.taps]) for _, _, t, n in items]
        )
        c = ops.rms_norm(ops.linear(feats, self.fc), self.hidden_norm, eps)
        pos = np.concatenate([np.arange(start, start + n) for _, start, _, n in items])
        cos, sin = ops.asarray(self.cos[pos]), ops.asarray(self.sin[pos])
        for li, layer in enumerate(self.layers):
            _, k, v = project_qkv(self.cfg, ops, layer, c, cos, sin)
            a = 0
            for st, start, _, n in items:
                lanes, lane = st.area
                lanes.put(li, lane, start, k[a : a + n], v[a : a + n])
                a += n
        for st, start, _, n in items:
            st.context = start + n

    def absorb_prompt(self, stream: Any, segment: Any, out: Any) -> None:
        st = self.states.get(stream.sid)
        if st is not None:
            self._add_context(st, out.start, out.taps, len(segment.tokens))

    def absorb(self, stream: Any, out: Any, accepted: int, emitted: list[int]) -> None:
        self.absorb_many([(stream, out, accepted, emitted)])

    def absorb_many(self, items: list[tuple[Any, Any, int, list[int]]]) -> None:
        batch = []
        for stream, out, accepted, _ in items:
            st = self.states.get(stream.sid)
            if st is not None and out.start == st.context and stream.fed > st.context:
                batch.append((st, out.start, out.taps, accepted + 1))
        self._add_context_many(batch)

    def propose(self, stream: Any, k: int) -> list[int]:
        return self.propose_many([stream], k)[0]

    def propose_many(self, streams: list[Any], k: int) -> list[list[int]]:
        active = []
        for s in streams:
            st = self.states.get(s.sid)
            if st is not None and st.context == s.fed:
                active.append((s, st))
        if not active:
            return [[] for _ in streams]
        drafts = self._propose_graph(active, k)
        if drafts is None:
            drafts = self._propose_eager(active, k)
        by_sid = {s.sid: d for (s, _), d in zip(active, drafts, strict=True)}
        return [by_sid.get(s.sid, []) for s in streams]

    def _propose_eager(self, active: list[tuple[Any, BlockState]], k: int) -> list[list[int]]:
        ops, m, b = self.model.ops, self.model, self.block_size
        firsts = np.asarray([s.tokens[s.fed] for s, _ in active])
        first = ops.embed(m.embed, firsts)
        x = ops.concat_rows(
            [
                r
                for j in range(len(active))
                for r in (ops.take_rows(first, [j]), *[self.mask] * (b - 1))
            ]
        )
        pos = np.concatenate([np.arange(s.fed, s.fed + b) for s, _ in active])
        cos, sin = ops.asarray(self.cos[pos]), ops.asarray(self.sin[pos])

        for li, layer in enumerate(self.layers):

            def attend(q: Any, kb: Any, vb: Any, li: int = li) -> Any:
                asks = []
                for j, (s, st) in enumerate(active):
                    lanes, lane = st.area
                    rows = slice(j * b, (j + 1) * b)
                    lanes.put(li, lane, s.fed, kb[rows], vb[rows])
                    see_all = np.full(b, s.fed - 1 + b)  # non-causal inside the block
                    asks.append((lanes, (lane, q[rows], see_all, s.fed + b)))
                return ops.concat_rows(attend_lanes(li, asks))

            x = decoder_layer(self.cfg, ops, layer, x, cos, sin, attend)
        rows = min(k, b - 1)
        take = np.concatenate([j * b + np.arange(1, 1 + rows) for j in range(len(active))])
        y = ops.rms_norm(ops.take_rows(x, take), self.norm, self.cfg.rms_norm_eps)
        logits = ops.to_numpy(ops.linear(y, m.lm_head)).reshape(len(active), rows, -1)
        return [[int(i) for i in np.argmax(logits[j], axis=-1)] for j in range(len(active))]

    def _propose_graph(
        self, active: list[tuple[Any, BlockState]], k: int
    ) -> list[list[int]] | None:
        """`_propose_eager` as one captured graph (block_pass.py), or None where the backend
        takes none or a stream's lane is not this drafter's lane memory."""
        if any(st.area[0] is not self.lanes for _, st in active):
            return None
        starts = [(st.area[1], s.fed, int(s.tokens[s.fed])) for s, st in active]
        w = block_pass.BlockWeights(
            self.model, self.cfg, self.layers, self.mask, self.norm, self.block_size
        )
        rope = (self.cos, self.sin)
        return block_pass.propose_graph(w, self.lanes, rope, starts, self.max_tokens(k))
