"""The conformance fixture itself: numpy's load error fails, another backend's skips."""

from __future__ import annotations

import pytest

from engine.errors import EngineFailure
from tests.conformance import conftest


@pytest.mark.parametrize("name,outcome", [("numpy", "fail"), ("cupy", "skip")])
def test_a_load_error_fails_numpy_and_skips_the_others(monkeypatch, name, outcome):
    def broken(path, backend):
        raise EngineFailure(f"{backend}: planted load error")

    monkeypatch.setattr(conftest, "load_model", broken)
    monkeypatch.setattr(conftest, "_models", {})
    kind = pytest.fail.Exception if outcome == "fail" else pytest.skip.Exception
    try:  # caught by hand: a skip must not skip this test, a failure must not fail it
        conftest.backend_model(name)
    except (pytest.fail.Exception, pytest.skip.Exception) as e:
        got = e
    else:
        raise AssertionError(f"backend {name} loaded a model that cannot load")
    assert type(got) is kind and "planted load error" in str(got), repr(got)
