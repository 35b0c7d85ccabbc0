"""`run --executor ray` on a small local Ray cluster: the same receipt as a local run, a
lost worker's arm retried once and then could-not-run, a killed runner leaving no engine.

Skipped where Ray is not installed (`pip install -e '.[ray]'`), and unless GATES_RAY_TESTS is
set: a Ray cluster on a small shared machine is minutes, not seconds. `nox -s ray` runs them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import run_gates
from gates.report.receipt import schema
from gates.run.executors import compare

ray = pytest.importorskip("ray")

pytestmark = [
    pytest.mark.ray,
    pytest.mark.skipif(
        not os.environ.get("GATES_RAY_TESTS"),
        reason="starts a local Ray cluster (minutes on 2 cores): GATES_RAY_TESTS=1, nox -s ray",
    ),
]
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One small local cluster for the module (2 CPUs); its workers' cache is their own."""
    old = os.environ.get("GATES_CACHE")
    os.environ["GATES_CACHE"] = str(tmp_path_factory.mktemp("workers"))
    try:
        ctx = ray.init(
            num_cpus=2,
            num_gpus=0,
            include_dashboard=False,
            log_to_driver=False,
            object_store_memory=80 * 2**20,
            runtime_env={"py_modules": [str(REPO / "gates")]},
        )
    finally:
        if old is None:
            os.environ.pop("GATES_CACHE")
        else:
            os.environ["GATES_CACHE"] = old
    yield ctx.address_info["gcs_address"]
    ray.shutdown()


def decided(man: dict) -> list:
    """What a receipt decides: the verdict, every gate's counts and cells."""
    gates = [(g["name"], g["status"], g["matched"], g["total"], g["cells"]) for g in man["gates"]]
    return [man["verdict"], man["exit_code"], *gates]


def arm_results(man: dict) -> list:
    return [(a["id"], a.get("status"), a.get("reason"), a.get("replies")) for a in man["arms"]]


def test_a_matrix_through_ray_equals_the_local_run(stub_repo, cluster, tmp_path, monkeypatch):
    stub_repo.commit("head changes tokens at fp8", OUTPUT_SALT="h", LEAK_PAGES=1)
    code, local, _ = run_gates(stub_repo, matrix="matrices/t.yaml")
    assert code == 1
    monkeypatch.setenv("GATES_CACHE", str(tmp_path / "ray-runner-cache"))  # nothing cached
    code, through_ray, md = run_gates(stub_repo, "--executor", "ray", matrix="matrices/t.yaml")
    assert code == 1
    assert decided(through_ray) == decided(local)
    assert arm_results(through_ray) == arm_results(local)
    stores = (tmp_path / "cache" / "results", tmp_path / "ray-runner-cache" / "results")
    assert compare.compare(local, through_ray, stores)[0] == []  # every stored reply, in full
    assert through_ray["matrix"]["ran"] == local["matrix"]["ran"] > 0
    ran = [a for a in through_ray["arms"] if a.get("status") == "ok"]
    assert ran and all(a["device"].endswith("· CPU") for a in ran)  # the node, in the receipt
    assert "| ran on |" in md
    assert "arms as Ray tasks on" in through_ray["machine"]["executor"]
    assert schema.problems(through_ray) == []


def engines(sha: str, kv: str = "fp8") -> list[tuple[int, int]]:
    """(pid, Ray worker pid) of each live `engine run --kv KV` of commit SHA that a live Ray
    worker started."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            args = [a.decode(errors="replace") for a in (d / "cmdline").read_bytes().split(b"\0")]
            state, ppid = (d / "stat").read_text().rsplit(")", 1)[1].split()[:2]
            cwd = os.readlink(d / "cwd")
        except (OSError, ValueError):
            continue
        if state == "Z" or "--kv" not in args or args[args.index("--kv") + 1] != kv:
            continue
        if "run" in args and cwd.endswith(f"/ray/checkouts/{sha}") and ray_worker(int(ppid)):
            out.append((int(d.name), int(ppid)))
    return out


def ray_worker(pid: int) -> bool:
    """A Ray worker process (its title is ``ray::…``), not an orphan's new parent (init)."""
    try:
        return pid > 1 and Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"ray::")
    except OSError:
        return False


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_for(what, seconds: float):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        got = what()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"waited {seconds} s for {what}")


def hanging_head(stub_repo, tmp_path: Path) -> tuple[Path, str]:
    """A head commit whose fp8 arms hang while the returned file exists."""
    hang = tmp_path / "hang"
    hang.write_text("")
    sha = stub_repo.commit(
        "head hangs at fp8 while a file exists", HANG_KV="fp8", HANG_FILE=str(hang)
    )
    return hang, sha


def in_thread(stub_repo) -> tuple[threading.Thread, dict]:
    got: dict = {}

    def go() -> None:
        got["code"], got["man"], _ = run_gates(stub_repo, "--executor", "ray")

    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t, got


def test_an_arm_whose_worker_is_lost_runs_again(stub_repo, cluster, tmp_path):
    hang, head = hanging_head(stub_repo, tmp_path)
    t, got = in_thread(stub_repo)
    engine, ray_worker = wait_for(lambda: engines(head), 180)[0]
    os.kill(ray_worker, signal.SIGKILL)
    wait_for(lambda: not alive(engine), 30)  # the watchdog ended the lost worker's engine
    hang.unlink()
    t.join(300)
    assert got["code"] == 0, got
    man = got["man"]
    assert all(a["status"] == "ok" for a in man["arms"] if a.get("status") != "not_comparable")
    assert "1 arm(s) retried after a lost worker" in man["machine"]["executor"]


def test_an_arm_lost_twice_could_not_run(stub_repo, cluster, tmp_path):
    hang, head = hanging_head(stub_repo, tmp_path)
    t, got = in_thread(stub_repo)
    killed: set[int] = set()
    try:
        while t.is_alive() and len(killed) < 8:
            for _, ray_worker in engines(head):
                if ray_worker not in killed:
                    killed.add(ray_worker)
                    os.kill(ray_worker, signal.SIGKILL)
            time.sleep(0.2)
        t.join(300)
    finally:
        hang.unlink()
    assert got["code"] == 3, got
    lost = [a for a in got["man"]["arms"] if a.get("status") == "crashed"]
    assert lost and all("fp8" in a["id"] and a["side"] == "head" for a in lost)
    assert all("its Ray worker was lost twice" in a["reason"] for a in lost)
    assert len(killed) == 2 * len(lost)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_killed_runner_leaves_no_engine_running(stub_repo, cluster, tmp_path, sig):
    hang, head = hanging_head(stub_repo, tmp_path)
    argv = [sys.executable, "-m", "gates", "run", "--repo", str(stub_repo.root), "--base"]
    argv += ["main~1", "--head", "main", "--matrix", "matrices/small.yaml", "--quiet"]
    argv += ["--out", str(tmp_path / "out"), "--executor", "ray", "--address", cluster]
    runner = subprocess.Popen(argv, cwd=REPO, stderr=subprocess.DEVNULL)
    try:
        hung = wait_for(lambda: engines(head), 180)
        runner.send_signal(sig)
        assert runner.wait(60) == (130 if sig == signal.SIGTERM else -signal.SIGKILL)
        wait_for(lambda: not any(alive(pid) for pid, _ in hung) and not engines(head), 60)
    finally:
        runner.kill()
        hang.unlink()


def test_speed_blocks_run_on_one_worker(stub_repo, cluster):
    small = (stub_repo.root / "matrices" / "small.yaml").read_text()
    speed = "speed: {blocks: 3, max_blocks: 4, add_blocks: 1, parallel: [1, 2]}\n"
    (stub_repo.root / "matrices" / "speed.yaml").write_text(small + speed)
    stub_repo.commit("speed matrix")
    main_py = stub_repo.root / "engine" / "__main__.py"
    main_py.write_text(main_py.read_text() + "# a change of the engine tree\n")
    stub_repo.commit("touch the engine")
    code, man, _ = run_gates(stub_repo, "--executor", "ray", matrix="matrices/speed.yaml")
    assert code == 0, man.get("speed")
    assert man["speed"]["status"] == "pass"
    assert {c["verdict"] for c in man["speed"]["cells"]} == {"equivalent"}
    assert schema.problems(man) == []


@pytest.mark.skipif(
    not os.environ.get("GATES_RAY_QUICK"),
    reason="the real quick matrix twice (20 min on the shared 2-core machine): GATES_RAY_QUICK=1",
)
def test_the_quick_matrix_through_ray_equals_the_local_run_arm_for_arm(cluster, tmp_path):
    """This repository's quick matrix (bundled tiny models, the real engine) of HEAD against
    its parent, run locally and through the local Ray cluster on separate caches (so Ray runs
    every arm): ``gates.run.executors.compare`` finds no difference, stored results in full."""
    out = {}
    for name, extra in (("local", []), ("ray", ["--executor", "ray", "--address", cluster])):
        argv = [sys.executable, "-m", "gates", "run", "--base", "HEAD~1", "--head", "HEAD"]
        argv += ["--matrix", "matrices/quick.yaml", "--quiet", "--out", str(tmp_path / name)]
        env = {**os.environ, "GATES_CACHE": str(tmp_path / f"cache-{name}")}
        got = subprocess.run([*argv, *extra], cwd=REPO, env=env, capture_output=True, text=True)
        assert got.returncode in (0, 1), got.stderr[-2000:]
        (out[name],) = (tmp_path / name).glob("*.json")
    stores = [str(tmp_path / f"cache-{n}" / "results") for n in ("local", "ray")]
    argv = [sys.executable, "-m", "gates.run.executors.compare", str(out["local"]), str(out["ray"])]
    got = subprocess.run([*argv, "--results", *stores], cwd=REPO, capture_output=True, text=True)
    assert got.returncode == 0 and got.stdout.startswith("EQUAL: "), got.stdout[-3000:]


def test_an_engine_started_by_a_ray_task_can_be_stopped_with_sigint(cluster):
    """A Ray task's thread blocks SIGINT and a child inherits the mask: `engine serve` never
    saw its clean stop (each served arm SIGKILLed after 10 s). worker.local_signals unblocks it."""

    @ray.remote(num_cpus=0)
    def blocked_in_a_child() -> tuple[bool, bool]:
        from gates.run.executors import worker

        def child() -> bool:
            out = subprocess.run(["grep", "SigBlk", "/proc/self/status"], capture_output=True)
            return bool(int(out.stdout.split()[1], 16) & (1 << (signal.SIGINT - 1)))

        before = child()
        with worker.local_signals():
            return before, child()

    assert ray.get(blocked_in_a_child.remote()) == (True, False)
