"""The block drafter (docs/drafters.md): reads the target's hidden states at a few layers
and drafts a whole block in one non-causal pass. Loaded from its own directory.

Per stream, in its lane area: each drafter layer's K/V of the context rows, computed
from the target's taps as rows are verified.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from engine.draft.lifecycle import LaneDrafter
from engine.errors import InputError
from engine.model.qwen3 import build_layer, decoder_layer, project_qkv, rope_tables
from engine.model.weights import load_tensors


@dataclass
class BlockState:
    area: dict[str, np.ndarray]
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

    def make_area(self) -> dict[str, np.ndarray]:
        c = self.cfg
        shape = (c.num_layers, self.rows, c.num_kv_heads, c.head_dim)
        return {"k": np.zeros(shape, np.float32), "v": np.zeros(shape, np.float32)}

    def new_state(self, stream: Any, area: dict[str, np.ndarray]) -> BlockState:
        area["k"][:, : stream.fed] = 0.0  # a reused prefix has no context rows
        area["v"][:, : stream.fed] = 0.0
        return BlockState(area=area, context=stream.fed)

    def _add_context(self, st: BlockState, start: int, taps: dict[int, np.ndarray], n: int) -> None:
        ops, eps = self.model.ops, self.cfg.rms_norm_eps
        feats = ops.concat_cols([ops.asarray(taps[i][:n]) for i in self.taps])
        c = ops.rms_norm(ops.linear(feats, self.fc), self.hidden_norm, eps)
        pos = np.arange(start, start + n)
        cos, sin = ops.asarray(self.cos[pos]), ops.asarray(self.sin[pos])
        for li, layer in enumerate(self.layers):
            _, k, v = project_qkv(self.cfg, ops, layer, c, cos, sin)
            st.area["k"][li, start : start + n] = ops.to_numpy(k)
            st.area["v"][li, start : start + n] = ops.to_numpy(v)
        st.context = start + n

    def absorb_prompt(self, stream: Any, segment: Any, out: Any) -> None:
        st = self.states.get(stream.sid)
        if st is not None:
            self._add_context(st, out.start, out.taps, len(segment.tokens))

    def absorb(self, stream: Any, out: Any, accepted: int, emitted: list[int]) -> None:
        st = self.states.get(stream.sid)
        if st is not None and out.start == st.context and stream.fed > st.context:
            self._add_context(st, out.start, out.taps, accepted + 1)

    def propose(self, stream: Any, k: int) -> list[int]:
        st = self.states.get(stream.sid)
        if st is None or st.context != stream.fed:
            return []
        ops, m = self.model.ops, self.model
        p, b = stream.fed - 1, self.block_size
        pos = np.arange(p + 1, p + 1 + b)
        first = ops.embed(m.embed, np.asarray([stream.tokens[stream.fed]]))
        x = ops.concat_rows([first] + [self.mask] * (b - 1))
        cos, sin = ops.asarray(self.cos[pos]), ops.asarray(self.sin[pos])
        see_all = np.full(b, p + b)  # non-causal inside the block

        for li, layer in enumerate(self.layers):

            def attend(q: Any, kb: Any, vb: Any, li: int = li) -> Any:
                keys = ops.concat_rows([ops.asarray(st.area["k"][li, : p + 1]), kb])
                values = ops.concat_rows([ops.asarray(st.area["v"][li, : p + 1]), vb])
                return ops.attention(q, keys, values, see_all)

            x = decoder_layer(self.cfg, ops, layer, x, cos, sin, attend)
        rows = min(k, b - 1)
        y = ops.rms_norm(ops.take_rows(x, np.arange(1, 1 + rows)), self.norm, self.cfg.rms_norm_eps)
        logits = ops.to_numpy(ops.linear(y, m.lm_head))
        return [int(i) for i in np.argmax(logits, axis=-1)]
