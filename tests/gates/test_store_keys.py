"""The result store's keys and entries on small hand-made inputs (gates/run/store.py)."""

from __future__ import annotations

import json
import stat

from gates.plan import hashes
from gates.run import store

ARGS = ("tree", {"kv": "fp8"}, "req", {"model:m": "abc"}, "fp", {"ENGINE_X": "1"})


def test_arm_key_changes_with_every_part_and_only_with_them() -> None:
    key = store.arm_key(*ARGS)
    assert len(key) == 64 and key == store.arm_key(*ARGS)
    assert key == store.arm_key("tree", {"kv": "fp8"}, "req", {"model:m": "abc"}, "fp",
                                dict(reversed(list({"ENGINE_X": "1"}.items()))))  # fmt: skip
    for i, other in enumerate(["tree2", {"kv": "bf16"}, "req2", {"model:m": "abd"}, "fp2", {}]):
        args = list(ARGS)
        args[i] = other
        assert store.arm_key(*args) != key, i


def test_fingerprint_leaves_out_the_core_count_only() -> None:
    m = {"cpu": "x", "cores": 2, "python": "3.11", "packages": {"numpy": "2"}}
    fp = store.fingerprint(m)
    assert len(fp) == 16 and fp == store.fingerprint({**m, "cores": 64})
    assert fp != store.fingerprint({**m, "python": "3.12"})
    assert fp != store.fingerprint({**m, "packages": {"numpy": "3"}})


def test_hash_dir_covers_names_and_bytes_not_pycache(tmp_path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.py").write_text("1")
    h = hashes.hash_dir(tmp_path)
    (tmp_path / "a" / "__pycache__").mkdir()
    (tmp_path / "a" / "__pycache__" / "x.pyc").write_text("junk")
    assert hashes.hash_dir(tmp_path) == h
    (tmp_path / "a" / "x.py").rename(tmp_path / "a" / "y.py")
    assert hashes.hash_dir(tmp_path) != h
    (tmp_path / "a" / "y.py").write_text("2")
    assert hashes.hash_dir(tmp_path / "a" / "y.py") == hashes.hash_file(tmp_path / "a" / "y.py")


def test_entries_round_trip_and_a_bad_one_is_a_counted_miss(tmp_path) -> None:
    st = store.Store(tmp_path)
    key = "ab" + "0" * 62
    assert st.read(key) is None and st.corrupt == []  # absent: a miss, not corrupt
    st.write(key, {"replies": [1]})
    assert (tmp_path / "ab" / f"{key}.json").is_file()
    assert st.read(key) == {"replies": [1]} and st.read(key, must_have="replies")
    assert st.read(key, must_have="metrics") is None and st.corrupt == [key]
    assert not (tmp_path / "ab" / f"{key}.json").exists()
    for bad in ("[1]", "{", "\xff"):
        (tmp_path / "ab" / f"{key}.json").write_text(bad, encoding="latin-1")
        assert st.read(key) is None
    assert len(st.corrupt) == 4
    assert store.Store(tmp_path, enabled=False).read(key) is None
    assert not list(tmp_path.glob("ab/.tmp-*"))


def test_write_atomic_leaves_a_readable_file(tmp_path) -> None:
    path = tmp_path / "r.md"
    store.write_atomic(path, "text")
    assert path.read_text() == "text" and not list(tmp_path.glob(".tmp-*"))
    assert stat.S_IMODE(path.stat().st_mode) & 0o044  # others may read a receipt
    assert json.loads(json.dumps({"k": path.read_text()}))["k"] == "text"
