"""The harness against this repository's real engine and bundled tiny model (contract check)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gates.__main__ import main

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "fixtures" / "models" / "tiny-qwen3"


@pytest.mark.skipif(
    not (REPO / "engine" / "__main__.py").exists() or not MODEL.is_dir(),
    reason="no engine or bundled model in this tree",
)
def test_selftest_sees_a_difference_with_the_real_engine(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GATES_CACHE", str(tmp_path / "cache"))
    code = main(["selftest", "--repo", str(REPO), "--ref", "HEAD", "--max-tokens", "6"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "The harness can see a difference." in out
    main(["clean", "--repo", str(REPO)])
