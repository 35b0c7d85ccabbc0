"""One side of a speed block: an ``engine bench --lockstep`` process, asked for one run at a time.

The runner starts a base and a head process for each block and asks them in turn, so both
meet the same seconds of the machine. Each process is pinned to the same CPU as its peer
(``cpu``), with the same environment. A process that dies, prints what is not the bench
schema, or takes longer than ``timeout`` raises ``SampleError``.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import tempfile
import time
from pathlib import Path

from gates.jsontypes import JsonObject
from gates.run.procs import forget, kill, spawn
from gates.run.speed import schema
from gates.run.speed.schema import NotComparable, TimedRun


class SampleError(Exception):
    def __init__(self, status: str, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


class Worker:
    """A running ``bench --lockstep``: ``wait_ready()`` once, then ``unit(n)`` per request;
    both read what it printed (``read``) into the bench schema's types, NotComparable where
    it is not that schema."""

    def __init__(
        self, argv: list[str], cwd: Path, env: dict[str, str], cpu: int | None, timeout: float
    ) -> None:
        self.timeout = timeout
        self._buf = b""
        self._err = tempfile.TemporaryFile()  # noqa: SIM115 (a pipe could fill and stall it)
        self.proc = spawn(
            argv,
            cpu=cpu,
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._err,
        )

    def wait_ready(self) -> int:
        """The bench schema version of its ready header."""
        got = self.read()
        if got.get("ready") is not True or "bench_schema" not in got:
            raise SampleError("not_comparable", "engine bench --lockstep printed no ready header")
        return schema.Header.parse(got).version

    def unit(
        self, n: int, turn: int | None = None, metrics: tuple[str, ...] = ()
    ) -> TimedRun | None:
        """A whole timed run of ``n`` streams; with ``turn``, the next ``turn`` actions of
        one (None until the run is over: ``"done": true`` with the run's row). ``metrics``:
        per-run metrics the row must have."""
        assert self.proc.stdin is not None
        ask = {"parallel": n} if turn is None else {"parallel": n, "turn": turn}
        try:
            self.proc.stdin.write(json.dumps(ask).encode() + b"\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise SampleError("could_not_run", self._died()) from None
        got = self.read()
        if "error" in got:
            raise SampleError("could_not_run", f"engine bench: {got['error']}")
        if got.get("done") is True:
            return schema.TimedRun.parse(got, n, list(metrics))
        if got.get("done") is not False:
            raise NotComparable(f"bench turn answered {got!r:.200}")
        return None

    def close(self) -> None:
        if self.proc.poll() is None:
            kill(self.proc)
        self.proc.wait()
        forget(self.proc)
        for f in (self.proc.stdin, self.proc.stdout, self._err):
            if f:
                f.close()

    def read(self) -> JsonObject:
        """The next JSON object it printed."""
        line = self._readline()
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            raise SampleError("not_comparable", f"engine bench printed {line[:200]!r}") from None
        if not isinstance(obj, dict):
            raise SampleError("not_comparable", f"engine bench printed {line[:200]!r}")
        return obj

    def _readline(self) -> str:
        assert self.proc.stdout is not None
        fd, deadline = self.proc.stdout.fileno(), time.monotonic() + self.timeout
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                self.close()
                raise SampleError("could_not_run", f"bench timed out after {self.timeout:.0f}s")
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise SampleError(_status(self.proc), self._died())
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return line.decode(errors="replace")

    def _died(self) -> str:
        code = self.proc.wait()
        self._err.seek(0)
        err = self._err.read().decode(errors="replace")
        lines = [x for x in err.strip().splitlines() if x.strip()]
        last = lines[-1] if lines else "no message"
        if code == 2:  # argparse: no bench command, or no --lockstep (before bench schema 2)
            return f"engine bench --lockstep refused (exit 2): {last}"
        return f"engine bench exited {code}: {last}"


def _status(proc: subprocess.Popen) -> str:
    # exit 2 (a flag it does not know: an engine before --lockstep) is not comparable
    return "not_comparable" if proc.wait() == 2 else "could_not_run"
