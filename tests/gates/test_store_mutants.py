"""gates/run/store.py on the paths its key tests do not reach: the machine probes (cpu_name,
nvidia-smi), the exact key bytes, and how entries and receipts are written.

Each test here was written against a surviving mutant (docs/testing.md, "Mutation testing").
"""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
from pathlib import Path

import pytest

from gates.plan import hashes
from gates.run import store

# ---------------------------------------------------------------- arm_key, by hand


def test_arm_key_is_sha256_of_these_exact_bytes() -> None:
    # The JSON below is written by hand (sorted field names, json's default separators), so
    # renaming a field, dropping the harness version or unsorting the keys changes the key.
    blob = (
        '{"config": {"kv": "fp8"}, "engine_tree": "tree", "env": {"ENGINE_X": "1"}, '
        '"fixtures": {"model:m": "abc"}, "harness": 2, "machine": "fp", "requests": "req"}'
    )
    assert store.HARNESS_VERSION == 2  # the literal above; bump both together
    want = hashlib.sha256(blob.encode()).hexdigest()
    got = store.arm_key("tree", {"kv": "fp8"}, "req", {"model:m": "abc"}, "fp", {"ENGINE_X": "1"})
    assert got == want


# ---------------------------------------------------------------- cpu_name


def _cpuinfo(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, text: str | None) -> None:
    """/proc/cpuinfo reads `text` (None: the file is missing)."""
    fake = tmp_path / "cpuinfo"
    if text is not None:
        fake.write_text(text)
    real = store.Path
    monkeypatch.setattr(store, "Path", lambda p: fake if p == "/proc/cpuinfo" else real(p))


def _no_platform_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store.platform, "system", lambda: "Linux")
    monkeypatch.setattr(store.platform, "processor", lambda: "proc-fallback")
    monkeypatch.setattr(store.platform, "machine", lambda: "machine-fallback")


def test_cpu_name_is_the_first_model_name_line(monkeypatch, tmp_path) -> None:
    _no_platform_fallback(monkeypatch)
    text = (
        "processor\t: 0\nvendor_id\t: GenuineIntel\n"
        "model\t\t: 143\n"  # starts with "model" but is not the name
        "model name\t:  Intel(R) Xeon(R) CPU @ 2.10GHz: rev 3 \n"  # a colon in the value
        "processor\t: 1\nmodel name\t: the second core\n"
    )
    _cpuinfo(monkeypatch, tmp_path, text)
    assert store.cpu_name() == "Intel(R) Xeon(R) CPU @ 2.10GHz: rev 3"


def test_cpu_name_without_a_model_name_line_falls_back(monkeypatch, tmp_path) -> None:
    _no_platform_fallback(monkeypatch)
    _cpuinfo(monkeypatch, tmp_path, "processor\t: 0\nBogoMIPS\t: 50.00\nMODEL NAME\t: no\n")
    assert store.cpu_name() == "proc-fallback"
    monkeypatch.setattr(store.platform, "processor", lambda: "")
    assert store.cpu_name() == "machine-fallback"


def test_cpu_name_without_proc_cpuinfo_falls_back(monkeypatch, tmp_path) -> None:
    _no_platform_fallback(monkeypatch)
    _cpuinfo(monkeypatch, tmp_path, None)
    assert store.cpu_name() == "proc-fallback"


def _sysctl(monkeypatch: pytest.MonkeyPatch, result: object) -> list[tuple[list, dict]]:
    """subprocess.run answers `result` (or raises it); returns the calls it saw."""
    calls: list[tuple[list, dict]] = []

    def fake_run(argv, **kw):
        calls.append((argv, kw))
        if isinstance(result, BaseException):
            raise result
        return subprocess.CompletedProcess(argv, 0, stdout=result, stderr="")

    monkeypatch.setattr(store.subprocess, "run", fake_run)
    return calls


def test_cpu_name_on_a_mac_asks_sysctl(monkeypatch, tmp_path) -> None:
    _no_platform_fallback(monkeypatch)
    _cpuinfo(monkeypatch, tmp_path, None)
    monkeypatch.setattr(store.platform, "system", lambda: "Darwin")
    calls = _sysctl(monkeypatch, "  Apple M2 Pro\n")
    assert store.cpu_name() == "Apple M2 Pro"
    [(argv, kw)] = calls
    assert argv == ["sysctl", "-n", "machdep.cpu.brand_string"]
    assert kw["capture_output"] is True and kw["text"] is True
    assert 0 < kw["timeout"] <= 5  # a hung sysctl costs a run at most 5 s


@pytest.mark.parametrize("error", [OSError("no sysctl"), subprocess.TimeoutExpired("sysctl", 5)])
def test_cpu_name_on_a_mac_without_sysctl_falls_back(monkeypatch, tmp_path, error) -> None:
    _no_platform_fallback(monkeypatch)
    _cpuinfo(monkeypatch, tmp_path, None)
    monkeypatch.setattr(store.platform, "system", lambda: "Darwin")
    _sysctl(monkeypatch, error)
    assert store.cpu_name() == "proc-fallback"


def test_cpu_name_on_linux_never_runs_sysctl(monkeypatch, tmp_path) -> None:
    _no_platform_fallback(monkeypatch)
    _cpuinfo(monkeypatch, tmp_path, None)
    calls = _sysctl(monkeypatch, "Apple M2 Pro\n")
    assert store.cpu_name() == "proc-fallback" and calls == []


# ---------------------------------------------------------------- nvidia-smi


def _fake_smi(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, body: str) -> Path:
    """An `nvidia-smi` first on PATH: a shell script running `body`."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    script = bindir / "nvidia-smi"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
    return script


def _seen(monkeypatch: pytest.MonkeyPatch) -> list[dict]:
    """Records subprocess.run's keyword arguments, then runs it for real."""
    seen: list[dict] = []
    real = subprocess.run

    def spy(argv, **kw):
        seen.append(kw)
        return real(argv, **kw)

    monkeypatch.setattr(store.subprocess, "run", spy)
    return seen


def test_nvidia_smi_one_stripped_value_per_gpu(monkeypatch, tmp_path) -> None:
    body = (
        '[ $# -eq 2 ] && [ "$1" = --query-gpu=name ] && [ "$2" = --format=csv,noheader ]'
        " || exit 9\n"
        "printf '  NVIDIA H200 \\n\\n   \\nNVIDIA H200\\n'"
    )
    _fake_smi(monkeypatch, tmp_path, body)
    seen = _seen(monkeypatch)
    assert store._nvidia_smi("name") == ["NVIDIA H200", "NVIDIA H200"]
    [kw] = seen
    assert kw["capture_output"] is True and kw["text"] is True
    assert 0 < kw["timeout"] <= 20  # a hung driver costs a run at most 20 s


def test_nvidia_smi_that_fails_means_no_gpus(monkeypatch, tmp_path) -> None:
    _fake_smi(monkeypatch, tmp_path, "echo 'No devices were found'; exit 6")
    assert store._nvidia_smi("name") == []


def test_no_nvidia_smi_means_no_gpus(monkeypatch, tmp_path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    assert store._nvidia_smi("name") == []


def test_a_hung_nvidia_smi_means_no_gpus(monkeypatch) -> None:
    def hang(argv, **kw):
        raise subprocess.TimeoutExpired(argv, kw.get("timeout"))

    monkeypatch.setattr(store.subprocess, "run", hang)
    assert store._nvidia_smi("name") == []


def test_gpus_and_driver_come_from_their_fields(monkeypatch, tmp_path) -> None:
    body = (
        'case "$1" in\n'
        "  --query-gpu=name) printf 'GPU-A\\nGPU-B\\n' ;;\n"
        "  --query-gpu=driver_version) printf '580.65\\n580.65\\n' ;;\n"
        "  *) exit 9 ;;\n"
        "esac"
    )
    _fake_smi(monkeypatch, tmp_path, body)
    store.gpus.cache_clear()
    store.nvidia_driver.cache_clear()
    try:
        assert store.gpus() == ["GPU-A", "GPU-B"]
        assert store.nvidia_driver() == "580.65"
    finally:
        store.gpus.cache_clear()
        store.nvidia_driver.cache_clear()


# -------------------------------------------------------------- write_atomic, Store.write


def _replaces(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """Records os.replace's (source, target), then renames for real."""
    seen: list[tuple[str, str]] = []
    real = os.replace

    def spy(src, dst):
        seen.append((str(src), str(dst)))
        real(src, dst)

    monkeypatch.setattr(store.os, "replace", spy)
    return seen


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o027, 0o640), (0o077, 0o600)])
def test_write_atomic_gives_the_mode_a_new_file_would_have(tmp_path, umask, mode) -> None:
    old = os.umask(umask)
    try:
        store.write_atomic(tmp_path / "r.md", "text")
        assert os.umask(umask) == umask  # the umask is put back as it was
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "r.md").stat().st_mode) == mode


def test_write_atomic_renames_a_hidden_sibling(monkeypatch, tmp_path) -> None:
    seen = _replaces(monkeypatch)
    store.write_atomic(tmp_path / "r.md", "text\n")
    [(src, dst)] = seen
    assert Path(src).parent == tmp_path and Path(src).name.startswith(".tmp-")  # same disk
    assert dst == str(tmp_path / "r.md") and (tmp_path / "r.md").read_text() == "text\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.md"]


def test_put_renames_a_hidden_sibling_into_a_new_tree(monkeypatch, tmp_path) -> None:
    root = tmp_path / "new" / "results"  # not there yet: put makes the parents
    st = store.Store(root)
    seen = _replaces(monkeypatch)
    st.write("ab" + "0" * 62, {"a": 1})
    st.write("ab" + "1" * 62, {"b": 2})  # the prefix directory exists now
    assert [Path(s).parent for s, _ in seen] == [root / "ab"] * 2
    assert all(Path(s).name.startswith(".tmp-") for s, _ in seen)
    assert sorted(p.name for p in (root / "ab").iterdir()) == [
        "ab" + "0" * 62 + ".json",
        "ab" + "1" * 62 + ".json",
    ]
    assert st.read("ab" + "1" * 62) == {"b": 2}


def test_put_that_fails_leaves_nothing_behind(tmp_path) -> None:
    st = store.Store(tmp_path)
    key = "cd" + "0" * 62
    with pytest.raises(TypeError, match="not JSON serializable"):
        st.write(key, {"ok": 1, "bad": object()})
    assert list((tmp_path / "cd").iterdir()) == []  # neither the entry nor its temporary
    assert st.read(key) is None and st.corrupt == []


def test_put_interrupted_after_its_rename_keeps_the_entry(monkeypatch, tmp_path) -> None:
    # a kill (KeyboardInterrupt) right after the rename: the temporary is gone already, and
    # the cleanup's failure to remove it must not hide the interrupt
    real = os.replace

    def rename_then_interrupt(src, dst):
        real(src, dst)
        raise KeyboardInterrupt

    monkeypatch.setattr(store.os, "replace", rename_then_interrupt)
    st = store.Store(tmp_path)
    with pytest.raises(KeyboardInterrupt):
        st.write("ef" + "0" * 62, {"a": 1})
    monkeypatch.setattr(store.os, "replace", real)
    assert st.read("ef" + "0" * 62) == {"a": 1}


def test_an_entry_that_is_a_directory_is_a_counted_miss(tmp_path) -> None:
    st = store.Store(tmp_path)
    key = "0a" + "1" * 62
    (tmp_path / "0a" / f"{key}.json").mkdir(parents=True)  # unreadable, and unlink fails
    assert st.read(key) is None and st.corrupt == [key]


def test_store_defaults_to_results_under_the_cache_root(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("GATES_CACHE", str(tmp_path / "cache"))
    st = store.Store()
    assert st.root == tmp_path / "cache" / "results" and st.enabled is True
    assert store.Store(tmp_path / "elsewhere").root == tmp_path / "elsewhere"


# ---------------------------------------------------------------- machine, fingerprint, hashes


def _a_machine(monkeypatch: pytest.MonkeyPatch, gpus: list[str], cores: int | None) -> None:
    monkeypatch.setattr(store, "cpu_name", lambda: "CPU X")
    monkeypatch.setattr(store.os, "cpu_count", lambda: cores)
    monkeypatch.setattr(store.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(store.platform, "system", lambda: "Linux")
    monkeypatch.setattr(store.platform, "release", lambda: "6.1")
    monkeypatch.setattr(store.platform, "python_version", lambda: "3.12.1")
    versions = {"numpy": "2.0", "nvidia-cublas": "13.1"}

    def version(name: str) -> str:
        if name not in versions:
            raise store.metadata.PackageNotFoundError(name)
        return versions[name]

    monkeypatch.setattr(store.metadata, "version", version)
    monkeypatch.setattr(store, "gpus", lambda: gpus)
    monkeypatch.setattr(store, "nvidia_driver", lambda: "580.65")
    store.machine.cache_clear()


def test_machine_names_every_part(monkeypatch) -> None:
    _a_machine(monkeypatch, ["H200", "H200"], 8)
    try:
        assert store.machine() == {
            "cpu": "CPU X",
            "cores": 8,
            "arch": "x86_64",
            "os": "Linux 6.1",
            "python": "3.12.1",
            "packages": {"numpy": "2.0", "nvidia-cublas": "13.1"},
            "gpus": ["H200", "H200"],
            "nvidia_driver": "580.65",
        }
        store.machine.cache_clear()
        monkeypatch.setattr(store, "gpus", lambda: [])
        cpu_only = store.machine()
        assert "nvidia_driver" not in cpu_only and cpu_only["gpus"] == []  # key unchanged
        assert store.fingerprint() == store.fingerprint(cpu_only)  # None: this machine
    finally:
        store.machine.cache_clear()


def test_machine_without_a_core_count_says_one(monkeypatch) -> None:
    _a_machine(monkeypatch, [], None)
    try:
        assert store.machine()["cores"] == 1
    finally:
        store.machine.cache_clear()


def test_fingerprint_is_sha256_of_sorted_json_by_hand() -> None:
    m = {"python": "3.12", "cores": 4, "cpu": "x"}
    want = hashlib.sha256(b'{"cpu": "x", "python": "3.12"}').hexdigest()[:16]
    assert store.fingerprint(m) == want


def test_hash_dir_by_hand(tmp_path) -> None:
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "y").write_bytes(b"2")
    (tmp_path / "a.txt").write_bytes(b"1")
    big = b"z" * ((1 << 20) + 3)  # more than one read
    (tmp_path / "c").write_bytes(big)
    sha = {k: hashlib.sha256(v).hexdigest() for k, v in {"1": b"1", "2": b"2", "z": big}.items()}
    assert hashes.hash_file(tmp_path / "c") == sha["z"]
    lines = f"a.txt\0{sha['1']}\nb/y\0{sha['2']}\nc\0{sha['z']}\n"
    assert hashes.hash_dir(tmp_path) == hashlib.sha256(lines.encode()).hexdigest()


def test_a_failed_atomic_write_leaves_no_temporary(tmp_path: Path, monkeypatch) -> None:
    # A write that fails half way (here: the rename; a full disk in real life) keeps the old
    # file and leaves no .tmp- file behind in the cache folder.
    target = tmp_path / "receipt.md"
    target.write_text("old")

    def refuse(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(store.os, "replace", refuse)
    with pytest.raises(OSError):
        store.write_atomic(target, "new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["receipt.md"]
    assert target.read_text() == "old"
