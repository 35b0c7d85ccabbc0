"""Nothing left behind: a runner killed with SIGINT, SIGTERM or SIGKILL while a served arm
and an `engine run` arm are running leaves no engine process alive. The engine is a stub
whose `serve` answers /health and then never answers a completion, and whose `run` never
ends; each records its pid, so the test counts survivors (polled with a deadline)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

STUB = textwrap.dedent(
    """
    import os, sys, time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from pathlib import Path

    PIDS = Path(os.environ["STUB_PIDS"])
    (PIDS / f"{sys.argv[1]}-{os.getpid()}").write_text("")

    class H(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            body = b'{"status": "ok"}'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self):
            (PIDS / "busy").write_text("")  # a completion is in flight: mid served arm
            time.sleep(3600)

    if sys.argv[1] == "serve":
        srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
        print(f"serving on http://127.0.0.1:{srv.server_address[1]}/v1", file=sys.stderr,
              flush=True)
        srv.serve_forever()
    time.sleep(3600)
    """
)

RUNNER = textwrap.dedent(
    """
    import signal, sys
    from pathlib import Path
    from gates.run.execute import ArmJob, base_env, run_all
    # a runner started from a background shell inherits SIGINT ignored (POSIX), and Python
    # then never installs its handler: the SIGINT case tests the runner, not the caller's shell
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from gates.run.procs import own_children
    from gates.run.served import run_served

    own_children()
    wt, work = Path(sys.argv[1]), Path(sys.argv[2])
    from gates.plan.arm_config import ArmConfig
    cfg = ArmConfig(model="m", backend="numpy", prompts="p", kv="bf16", parallel=1,
                    paging="off", drafter="none", served="plain")
    env = base_env(wt, "numpy", {}, work)
    env["STUB_PIDS"] = sys.argv[3]
    req = b'{"id": "a", "prompt_ids": [1, 2], "max_tokens": 4}\\n'
    jobs = [
        ArmJob(f"k{i}", f"arm{i}", wt, cfg, wt / "model", req, 120, work / f"arm{i}", env,
               runner=runner)
        for i, runner in enumerate((run_served, None))
    ]
    run_all(jobs, 2, lambda *a: None)
    """
)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"  # a zombie has no memory, no GPU, no socket left


def _wait_for(cond, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.02)
    return cond()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and PR_SET_PDEATHSIG")
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_a_killed_runner_leaves_no_engine_process(tmp_path, sig):
    wt, pids = tmp_path / "wt", tmp_path / "pids"
    (wt / "engine").mkdir(parents=True)
    (wt / "engine" / "__init__.py").write_text("")
    (wt / "engine" / "__main__.py").write_text(STUB)
    pids.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    runner = subprocess.Popen(
        [sys.executable, "-c", RUNNER, str(wt), str(tmp_path / "work"), str(pids)],
        cwd=REPO,
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        started = _wait_for(
            lambda: (pids / "busy").exists() and len(list(pids.glob("*-*"))) == 2, 60
        )
        assert started, f"the arms never started: {sorted(p.name for p in pids.iterdir())}"
        engines = [int(p.name.split("-")[1]) for p in pids.glob("*-*")]
        runner.send_signal(sig)
        runner.wait(timeout=30)
        assert _wait_for(lambda: not any(map(_alive, engines)), 15)
        survivors = [pid for pid in engines if _alive(pid)]
        assert survivors == [], f"{signal.Signals(sig).name}: engine processes {survivors} live on"
    finally:
        if runner.poll() is None:
            runner.kill()
        for p in pids.glob("*-*"):
            pid = int(p.name.split("-")[1])
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
