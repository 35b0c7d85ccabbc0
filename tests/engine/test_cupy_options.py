"""The cupy backend's knobs: read from the environment once, typed, bad values refused with
one line naming the variable (no GPU needed)."""

from __future__ import annotations

import pytest

from engine.errors import InputError
from engine.ops.cupy_options import CupyOptions


def test_defaults_and_values_from_the_environment() -> None:
    assert CupyOptions.from_environ({}) == CupyOptions(row_tile=1, graphs=True, gemm="mma")
    assert CupyOptions().row_tile == 1  # by the GEMM: mma sums in an order of K alone
    assert CupyOptions(gemm="cublas").row_tile == 8
    assert CupyOptions.from_environ({"ENGINE_CUPY_GEMM": "cublas"}).row_tile == 8
    assert CupyOptions.from_environ({"ENGINE_CUPY_GEMM": "own"}).row_tile == 1
    got = CupyOptions.from_environ({"ENGINE_CUPY_ROW_TILE": "16", "ENGINE_CUPY_GRAPHS": "0"})
    assert got == CupyOptions(row_tile=16, graphs=False)
    assert CupyOptions.from_environ({"ENGINE_CUPY_GRAPHS": "1"}).graphs is True
    assert CupyOptions.from_environ({}).attend_split == 512
    assert CupyOptions.from_environ({"ENGINE_CUPY_ATTEND_SPLIT": "0"}).attend_split == 0
    assert CupyOptions.from_environ({}).attend_tile == 64
    assert CupyOptions.from_environ({}).attend_split_heads == 4
    assert CupyOptions.from_environ({"ENGINE_CUPY_ATTEND_HEADS_FROM": "0"}).attend_heads_from == 0
    assert CupyOptions.from_environ({"ENGINE_CUPY_ATTEND_TILE": "0"}).attend_tile == 0
    assert CupyOptions.from_environ({}).graph_rows == 512
    assert CupyOptions.from_environ({"ENGINE_CUPY_GRAPH_ROWS": "64"}).graph_rows == 64
    assert CupyOptions.from_environ({}).gemm == "mma"
    assert CupyOptions.from_environ({"ENGINE_CUPY_GEMM": "cublas"}).gemm == "cublas"
    assert CupyOptions.from_environ({"ENGINE_CUPY_GEMM": "own"}).gemm == "own"
    assert CupyOptions.from_environ({"ENGINE_CUPY_GEMM": "mma"}).gemm == "mma"
    assert CupyOptions.from_environ({}).pdl is True
    assert CupyOptions.from_environ({"ENGINE_CUPY_PDL": "0"}).pdl is False
    assert CupyOptions.from_environ({}).silu_epilogue == 1
    assert CupyOptions.from_environ({"ENGINE_CUPY_SILU_EPILOGUE": "0"}).silu_epilogue == 0
    assert CupyOptions.from_environ({}).wide_from == 128
    assert CupyOptions.from_environ({"ENGINE_CUPY_WIDE_FROM": "128"}).wide_from == 128
    assert CupyOptions.from_environ({}).attend_thread_scores == 1
    got = CupyOptions.from_environ({"ENGINE_CUPY_ATTEND_THREAD_SCORES": "0"})
    assert got.attend_thread_scores == 0
    assert CupyOptions.from_environ({"ENGINE_CUPY_WIDE_FROM": "0"}).wide_from == 0
    assert CupyOptions.from_environ({}).attend_early == 1
    assert CupyOptions.from_environ({"ENGINE_CUPY_ATTEND_EARLY": "0"}).attend_early == 0
    assert CupyOptions.from_environ({}).attend_store == 0
    assert CupyOptions.from_environ({"ENGINE_CUPY_ATTEND_STORE": "1"}).attend_store == 1
    assert CupyOptions.from_environ({}).attend_tail == 0
    assert CupyOptions.from_environ({"ENGINE_CUPY_ATTEND_TAIL": "1"}).attend_tail == 1
    assert CupyOptions.from_environ({"ENGINE_CUPY_WIDE_FROM": "1"}).wide_from == 1
    assert CupyOptions.from_environ({}).wide_deep == 1
    assert CupyOptions.from_environ({"ENGINE_CUPY_WIDE_DEEP": "0"}).wide_deep == 0


@pytest.mark.parametrize(
    "env,name",
    [
        ({"ENGINE_CUPY_ROW_TILE": "0"}, "ENGINE_CUPY_ROW_TILE"),
        ({"ENGINE_CUPY_ROW_TILE": "eight"}, "ENGINE_CUPY_ROW_TILE"),
        ({"ENGINE_CUPY_GRAPHS": "yes"}, "ENGINE_CUPY_GRAPHS"),
        ({"ENGINE_CUPY_ATTEND_SPLIT": "-1"}, "ENGINE_CUPY_ATTEND_SPLIT"),
        ({"ENGINE_CUPY_ATTEND_SPLIT": "many"}, "ENGINE_CUPY_ATTEND_SPLIT"),
        ({"ENGINE_CUPY_GRAPH_ROWS": "-8"}, "ENGINE_CUPY_GRAPH_ROWS"),
        ({"ENGINE_CUPY_ATTEND_TAIL": "2"}, "ENGINE_CUPY_ATTEND_TAIL"),
        ({"ENGINE_CUPY_ATTEND_TILE": "x"}, "ENGINE_CUPY_ATTEND_TILE"),
        ({"ENGINE_CUPY_ATTEND_SPLIT_HEADS": "two"}, "ENGINE_CUPY_ATTEND_SPLIT_HEADS"),
        ({"ENGINE_CUPY_ATTEND_HEADS_FROM": "-1"}, "ENGINE_CUPY_ATTEND_HEADS_FROM"),
        ({"ENGINE_CUPY_GEMM": "cutlass"}, "ENGINE_CUPY_GEMM"),
        ({"ENGINE_CUPY_GEMM": ""}, "ENGINE_CUPY_GEMM"),
        ({"ENGINE_CUPY_PDL": "on"}, "ENGINE_CUPY_PDL"),
        ({"ENGINE_CUPY_SILU_EPILOGUE": "2"}, "ENGINE_CUPY_SILU_EPILOGUE"),
        ({"ENGINE_CUPY_SILU_EPILOGUE": "on"}, "ENGINE_CUPY_SILU_EPILOGUE"),
        ({"ENGINE_CUPY_WIDE_FROM": "-1"}, "ENGINE_CUPY_WIDE_FROM"),
        ({"ENGINE_CUPY_WIDE_FROM": "wide"}, "ENGINE_CUPY_WIDE_FROM"),
        ({"ENGINE_CUPY_ATTEND_THREAD_SCORES": "2"}, "ENGINE_CUPY_ATTEND_THREAD_SCORES"),
        ({"ENGINE_CUPY_ATTEND_EARLY": "2"}, "ENGINE_CUPY_ATTEND_EARLY"),
        ({"ENGINE_CUPY_ATTEND_STORE": "on"}, "ENGINE_CUPY_ATTEND_STORE"),
        ({"ENGINE_CUPY_ATTEND_STORE": "2"}, "ENGINE_CUPY_ATTEND_STORE"),
        ({"ENGINE_CUPY_WIDE_DEEP": "8"}, "ENGINE_CUPY_WIDE_DEEP"),
        ({"ENGINE_CUPY_WIDE_DEEP": "deep"}, "ENGINE_CUPY_WIDE_DEEP"),
    ],
)
def test_bad_values_name_the_variable(env: dict[str, str], name: str) -> None:
    with pytest.raises(InputError, match=name):
        CupyOptions.from_environ(env)


def test_options_are_frozen() -> None:
    opts = CupyOptions()
    with pytest.raises(AttributeError):
        opts.row_tile = 4  # type: ignore[misc]
