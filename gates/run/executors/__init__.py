"""Where arms run: the seam between the arm runner and the machines.

Without ``--executor`` (or with ``--executor local``) arms run on this machine
(``gates.run.execute.run_all``) and nothing here is used. ``--executor ray`` runs each arm as a
Ray task (``gates/run/executors/ray.py``); Ray is imported only then, so a machine without it
runs every other command as before, and asking for it there is bad input naming the extra.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from gates import BadInput

if TYPE_CHECKING:
    from pathlib import Path

    from gates.plan.build import Arm
    from gates.plan.speed import SpeedSpec
    from gates.run import envs, refs
    from gates.run.capabilities import Capabilities
    from gates.run.execute import ArmJob, Progress
    from gates.run.info import ExecutorFacts
    from gates.run.results import ArmRun
    from gates.run.speed.results import SpeedRun
    from gates.run.store import Store

EXECUTORS = ("local", "ray")
RAY_MISSING = (
    "--executor ray needs Ray, which is not installed here: "
    "pip install -e '.[ray]' (or pip install 'ray>=2.9')"
)


class Executor(Protocol):
    """What the run needs from a place that runs arms somewhere other than here."""

    def fingerprint(self, arm: Arm) -> str:
        """The machine fingerprint the arm's result is keyed under (where it will run)."""
        ...

    def capabilities(self, side: refs.Side, env: envs.Env) -> tuple[Capabilities | None, str]:
        """A side's engine capabilities as a worker sees them (its backends, its GPU)."""
        ...

    def run_all(
        self,
        jobs: list[ArmJob],
        workers: int,
        on_done: Callable[[ArmJob, ArmRun, bool], None],
        progress: Progress | None = None,
        devices: list[str] | None = None,
        st: Store | None = None,
    ) -> None:
        """As ``gates.run.execute.run_all``: every job's ``on_done`` once, whatever happened
        to its arm, unless an interrupt stopped the run first (then none for the arms it
        stopped)."""
        ...

    def speed(
        self, sides: dict[str, refs.Side], model: Path, backend: str, spec: SpeedSpec
    ) -> SpeedRun:
        """The speed part of the run, on one worker (both sides on one machine)."""
        ...

    def run_info(self) -> ExecutorFacts:
        """What the receipt records about where the arms ran (machine, fingerprint, notes)."""
        ...

    def close(self) -> None: ...


def make(name: str, address: str | None, repo: Any, backends: list[str]) -> Any:
    """The executor named ``name`` (None for local), or BadInput (exit 2)."""
    if name == "local":
        if address:
            raise BadInput("--address is for --executor ray")
        return None
    if name != "ray":
        raise BadInput(f"--executor {name}: expected one of {', '.join(EXECUTORS)}")
    try:
        import ray  # noqa: F401 - only to learn whether it is there
    except ImportError:
        raise BadInput(RAY_MISSING) from None
    from gates.run.executors.ray import RayExecutor

    return RayExecutor.start(address, repo, backends)
