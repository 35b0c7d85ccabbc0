"""Tokenizer from tokenizer.json (the `tokenizers` package) and the chat template from
tokenizer_config.json (jinja2)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from engine.errors import InputError


class Tokenizer:
    def __init__(self, model_dir: str | Path) -> None:
        from tokenizers import Tokenizer as HFTokenizer

        model_dir = Path(model_dir)
        path = model_dir / "tokenizer.json"
        if not path.is_file():
            raise InputError(f"{path}: not found")
        try:
            self._tok = HFTokenizer.from_file(str(path))
        except Exception as exc:
            raise InputError(f"{path}: cannot load ({exc})") from None
        self.vocab_size = self._tok.get_vocab_size(with_added_tokens=True)
        self.config: dict[str, Any] = {}
        cfg_path = model_dir / "tokenizer_config.json"
        if cfg_path.is_file():
            try:
                self.config = json.loads(cfg_path.read_text())
            except json.JSONDecodeError as exc:
                raise InputError(f"{cfg_path}: not valid JSON ({exc})") from None
        self._template = None
        template = self.config.get("chat_template")
        if isinstance(template, str):
            env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
            env.globals["raise_exception"] = _raise
            try:
                self._template = env.from_string(template)
            except jinja2.TemplateSyntaxError as exc:
                raise InputError(f"{cfg_path}: chat_template does not parse ({exc})") from None

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int]) -> str:
        """Ids past the tokenizer's vocabulary (the model's vocab may be larger) decode to
        U+FFFD instead of failing."""
        out, run = [], []
        for i in ids:
            if 0 <= i < self.vocab_size:
                run.append(i)
                continue
            if run:
                out.append(self._tok.decode(run, skip_special_tokens=True))
                run = []
            out.append("\ufffd")
        if run:
            out.append(self._tok.decode(run, skip_special_tokens=True))
        return "".join(out)

    def apply_chat_template(
        self, messages: list[dict[str, str]], add_generation_prompt: bool = True
    ) -> str:
        if self._template is None:
            raise InputError("tokenizer_config.json: no chat_template")
        return self._template.render(
            messages=messages,
            add_generation_prompt=add_generation_prompt,
            bos_token=self.config.get("bos_token") or "",
            eos_token=self.config.get("eos_token") or "",
        )


def _raise(message: str) -> None:
    raise InputError(f"chat template: {message}")
