"""bench/load.py at a small size: every stream completes with the solo run's ids while idle
sockets that never finish their headers are held beside them (the full 4096-client run is
`nox -s load`; its figures are in docs/serving.md)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

LOAD = Path(__file__).parents[2] / "bench" / "load.py"


def test_a_small_load_run_is_exact_and_holds_the_idle_sockets(tmp_path):
    spec = importlib.util.spec_from_file_location("load", LOAD)
    load = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(load)
    out = tmp_path / "load.json"
    argv = ["--clients", "48", "--tokens", "4", "--idle", "8", "--parallel", "8", "--unique", "8"]
    assert load.main([*argv, "--json", str(out)]) == 0
    got = json.loads(out.read_text())
    assert (got["errors"], got["not_equal_to_solo"], got["idle_held"]) == (0, 0, 8)
    assert got["tokens"] == 48 * 4
