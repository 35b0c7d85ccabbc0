"""EngineConfig: its defaults are the command line's, and every bound is tested on its edge."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from engine.cli.common import add_engine_flags, engine_config
from engine.config import DRAFTERS, EngineConfig, env_flags, flag_name, knob_type, knobs
from engine.errors import InputError
from engine.kv.codec import KV_DTYPES


def cli_defaults() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_engine_flags(p)
    p.add_argument("--serial", action="store_true")
    return p.parse_args([])


def test_cli_defaults_are_engine_configs_defaults() -> None:
    from_cli = engine_config(cli_defaults())
    plain = EngineConfig(flags={})
    for f in dataclasses.fields(EngineConfig):
        if f.name != "flags":
            assert getattr(from_cli, f.name) == getattr(plain, f.name), f.name
    assert plain.validate() is plain


def test_lanes_are_one_when_serial() -> None:
    assert EngineConfig(parallel=4, flags={}).lanes == 4
    assert EngineConfig(parallel=4, serial=True, flags={}).lanes == 1


def test_env_flags_are_the_engine_ones_only() -> None:
    env = {"ENGINE_X": "1", "ENGINE_": "", "OTHER": "2", "engine_y": "3"}
    assert env_flags(env) == {"ENGINE_X": "1", "ENGINE_": ""}


POSITIVE = ("parallel", "context", "page_rows", "step_rows", "share", "draft_tokens")


@pytest.mark.parametrize("name", POSITIVE)
@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf")])
def test_positive_fields_refuse_zero_negative_nan_and_inf(name: str, bad: float) -> None:
    flag = "--" + name.replace("_", "-")
    with pytest.raises(InputError, match=f"^{flag}: must be a number > 0, got"):
        EngineConfig(flags={}, **{name: bad}).validate()


@pytest.mark.parametrize("name", POSITIVE)
def test_positive_fields_take_their_smallest_value(name: str) -> None:
    small = 1e-9 if name == "share" else 1
    assert getattr(EngineConfig(flags={}, **{name: small}).validate(), name) == small


def test_bounds_on_their_edges() -> None:
    assert EngineConfig(parallel=64, flags={}).validate().parallel == 64
    with pytest.raises(InputError, match="^--parallel: at most 64 lanes, got 65$"):
        EngineConfig(parallel=65, flags={}).validate()
    assert EngineConfig(draft_tokens=16, flags={}).validate().draft_tokens == 16
    with pytest.raises(InputError, match="^--draft-tokens: at most 16, got 17$"):
        EngineConfig(draft_tokens=17, flags={}).validate()
    assert EngineConfig(kv_pages=0, flags={}).validate().kv_pages == 0
    with pytest.raises(InputError, match="^--kv-pages: must be >= 0, got -1$"):
        EngineConfig(kv_pages=-1, flags={}).validate()


def test_kv_and_drafter_take_only_their_names() -> None:
    for kv in KV_DTYPES:
        EngineConfig(kv=kv, flags={}).validate()
    with pytest.raises(InputError, match="^--kv: expected one of bf16, fp8, f32, got 'fp16'$"):
        EngineConfig(kv="fp16", flags={}).validate()
    for d in DRAFTERS:
        EngineConfig(drafter=d, flags={}).validate()
    want = "^--drafter: expected one of none, mtp, block, oracle, noisy, got 'x'$"
    with pytest.raises(InputError, match=want):
        EngineConfig(drafter="x", flags={}).validate()


def test_overrides_are_validated_too() -> None:
    assert engine_config(cli_defaults(), parallel=3).parallel == 3
    with pytest.raises(InputError, match="--parallel"):
        engine_config(cli_defaults(), parallel=0)


# every command that takes engine flags, with its required arguments only
COMMANDS = {
    "run": ["--model", "m", "--requests", "in.jsonl", "--out", "out.jsonl"],
    "generate": ["--model", "m", "--prompt", "hello"],
    "bench": ["--model", "m"],
    "serve": ["--model", "m"],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_commands_engine_flags_default_to_engine_configs_fields(command: str) -> None:
    """`python -m engine COMMAND` as parsed: each knob's flag is there (bench's and generate's
    --parallel excepted) with EngineConfig's default, help and choices, so a default or
    help restated on the command line cannot drift from the field."""
    from engine.__main__ import build_parser

    parser = build_parser()
    args = parser.parse_args([command, *COMMANDS[command]])
    actions = {a.dest: a for a in parser._subparsers._group_actions[0].choices[command]._actions}
    for f in knobs():
        if f.name == "parallel" and command in ("bench", "generate"):
            continue  # bench sweeps its own --parallel list; generate runs one stream
        assert getattr(args, f.name) == f.default, (command, f.name)
        assert actions[f.name].option_strings == [flag_name(f.name)], (command, f.name)
        assert actions[f.name].help == f.metadata["help"], (command, f.name)
        assert actions[f.name].choices == f.metadata["choices"], (command, f.name)
    overrides = {"parallel": 1} if command == "bench" else {}
    from_cli = engine_config(args, **overrides)
    for f in dataclasses.fields(EngineConfig):
        if f.name != "flags":
            assert getattr(from_cli, f.name) == f.default, (command, f.name)


def test_knobs_are_every_field_but_serial_and_flags() -> None:
    names = [f.name for f in knobs()]
    assert names == [f.name for f in dataclasses.fields(EngineConfig)][:-2]
    assert all(f.metadata["help"] for f in knobs())
    assert {knob_type(f) for f in knobs()} == {int, float, str}


def test_a_flag_parses_to_its_fields_type() -> None:
    p = argparse.ArgumentParser()
    add_engine_flags(p)
    args = p.parse_args(
        ["--share", "0.5", "--context", "64", "--drafter-model", "d", "--kv", "fp8"]
    )
    cfg = engine_config(args)
    assert (cfg.share, cfg.context, cfg.drafter_model, cfg.kv) == (0.5, 64, "d", "fp8")
    assert type(cfg.context) is int and type(cfg.share) is float
