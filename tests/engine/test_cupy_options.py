"""The cupy backend's knobs: read from the environment once, typed, bad values refused with
one line naming the variable (no GPU needed)."""

from __future__ import annotations

import pytest

from engine.errors import InputError
from engine.ops.cupy_options import CupyOptions


def test_defaults_and_values_from_the_environment() -> None:
    assert CupyOptions.from_environ({}) == CupyOptions(row_tile=8, graphs=True)
    got = CupyOptions.from_environ({"ENGINE_CUPY_ROW_TILE": "16", "ENGINE_CUPY_GRAPHS": "0"})
    assert got == CupyOptions(row_tile=16, graphs=False)
    assert CupyOptions.from_environ({"ENGINE_CUPY_GRAPHS": "1"}).graphs is True


@pytest.mark.parametrize(
    "env,name",
    [
        ({"ENGINE_CUPY_ROW_TILE": "0"}, "ENGINE_CUPY_ROW_TILE"),
        ({"ENGINE_CUPY_ROW_TILE": "eight"}, "ENGINE_CUPY_ROW_TILE"),
        ({"ENGINE_CUPY_GRAPHS": "yes"}, "ENGINE_CUPY_GRAPHS"),
    ],
)
def test_bad_values_name_the_variable(env: dict[str, str], name: str) -> None:
    with pytest.raises(InputError, match=name):
        CupyOptions.from_environ(env)


def test_options_are_frozen() -> None:
    opts = CupyOptions()
    with pytest.raises(AttributeError):
        opts.row_tile = 4  # type: ignore[misc]
