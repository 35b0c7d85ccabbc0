"""``--executor ray``: every arm a Ray task, on a local Ray instance or a cluster.

The runner resolves refs, plans arms and keys them as a local run does; then each arm that is
not in the result cache goes to Ray as a task asking for one GPU (CUDA backends) or one CPU,
carrying its commit as a git bundle and its fixtures as archives through the object store
(``ship.py``); the worker checks the commit out and runs the arm (``worker.py``); the result
comes back through the object store and lands in the cache and the receipt as a local one.

*Kinds.* At start one probe task per node reports its machine fingerprint (CPU, GPUs, driver,
wheels); nodes of one fingerprint are one *kind*. An arm's result is keyed under the
fingerprint of the kind it runs on, and base and head of one configuration (and an
oracle/noisy arm with its plain twin) always run on one kind: with several kinds each
configuration group is given one, weighted by capacity, and its arms are pinned to that
kind's nodes. So speed and bits compare like with like, and the receipt names each arm's
node and GPU.

*Faults.* A task whose worker or node is lost is submitted once more (a lost node is gone
from the cluster, so the retry runs elsewhere; with several nodes of its kind it is pinned to
the next one); lost again, the arm could not run, with both reasons. Ctrl-C, SIGTERM or SIGHUP
of the runner cancel every task it has in flight (force: the worker dies, and its watchdog
kills the engine), and a runner killed outright takes its tasks with it (Ray ends a job's
tasks when its driver goes).
"""

from __future__ import annotations

import contextlib
import hashlib
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import git
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

import gates
from gates import BadInput
from gates.jsontypes import JsonObject
from gates.plan.arm_config import ArmConfig
from gates.plan.build import Arm
from gates.plan.speed import SpeedSpec
from gates.run import envs, refs
from gates.run.arms import truth_of
from gates.run.capabilities import Capabilities
from gates.run.execute import GPU_BACKENDS, ArmJob, Progress, stored_run
from gates.run.executors import ship, worker
from gates.run.info import ExecutorFacts
from gates.run.results import ArmRun, Status
from gates.run.speed.results import SpeedRun
from gates.run.store import Store

# This runner's gates package travels to the workers (Ray uploads it with the job). A caller
# that starts Ray itself passes the same to ray.init; tasks cannot add a local folder.
RUNTIME_ENV = {"py_modules": [str(Path(gates.__file__).parent)]}


@ray.remote(max_retries=0)
def _arm(payload: ship.ArmPayload, gpu: bool) -> ArmRun:
    device = ",".join(str(i) for i in ray.get_gpu_ids()) if gpu else None
    return worker.run(payload, ray.get, device or None)


@ray.remote(max_retries=0)
def _capabilities(commit: ship.Commit, env_spec: list[str] | None) -> tuple:
    return worker.probe_capabilities(commit, env_spec, ray.get)


@ray.remote(max_retries=0)
def _speed(
    commits: dict[str, ship.Commit],
    specs: dict[str, list[str] | None],
    asset: ship.Asset,
    backend: str,
    spec: SpeedSpec,
) -> SpeedRun:
    from gates.run.speed.measure import run_speed

    sides = {k: worker.checkout(c, ray.get) for k, c in commits.items()}
    pythons = {k: worker.python_for(s) for k, s in specs.items()}
    model = worker.unpack(asset, ray.get)
    with worker.local_signals():
        return run_speed(sides, model, backend, spec, refs.cache_root(), pythons=pythons)


@ray.remote(max_retries=0)
def _facts() -> worker.NodeFacts:
    return worker.facts()


@dataclass
class Kind:
    """Nodes of one machine fingerprint that can run one sort of arm (GPU or CPU)."""

    fp: str
    machine: JsonObject  # store.machine() of its nodes, as the manifest writes it
    nodes: list[str] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    capacity: int = 0
    turn: int = 0  # the next node to pin to (several kinds only)


def kinds_of(nodes: list[JsonObject], facts: dict[str, worker.NodeFacts], gpu: bool) -> list[Kind]:
    """The kinds of node able to run GPU (or CPU) arms, the largest first."""
    res = "GPU" if gpu else "CPU"
    out: dict[str, Kind] = {}
    for n in nodes:
        have = int(n["Resources"].get(res, 0))
        if have <= 0:
            continue
        f = facts[n["NodeID"]]
        k = out.setdefault(f.fp, Kind(f.fp, f.machine))
        k.nodes.append(n["NodeID"])
        k.hosts.append(f.host)
        k.capacity += have
    return sorted(out.values(), key=lambda k: (-k.capacity, k.fp))


def _alive() -> list[JsonObject]:
    """Ray's live nodes, as ray.nodes() describes them."""
    return [n for n in ray.nodes() if n.get("Alive")]


def _connect(address: str | None) -> None:
    if ray.is_initialized():
        return
    try:
        if address:
            ray.init(address=address, log_to_driver=False, runtime_env=RUNTIME_ENV)
        else:
            ray.init(include_dashboard=False, log_to_driver=False, runtime_env=RUNTIME_ENV)
    except (ConnectionError, RuntimeError, ValueError) as e:
        where = f"--address {address}" if address else "a local Ray instance"
        raise BadInput(f"{where}: Ray did not start or connect: {e}") from None


@contextlib.contextmanager
def _interruptible() -> Iterator[None]:
    """SIGTERM and SIGHUP raise KeyboardInterrupt (as Ctrl-C does), so tasks get cancelled."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    old = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _why(e: BaseException) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return f"{type(e).__name__}: {lines[0] if lines else ''}"[:300]


class RayExecutor:
    def __init__(
        self, address: str | None, repo: git.Repo, kinds: dict[bool, list[Kind]], gpu: bool
    ) -> None:
        self.address = address
        self.kinds = kinds
        self.gpu = gpu  # the matrix has CUDA arms: the run's machine is a GPU kind
        common = Path(repo.git.rev_parse("--git-common-dir"))
        git_dir = common if common.is_absolute() else refs.repo_root(repo) / common
        self.shipper = ship.Shipper(git_dir.resolve(), ray.put)
        self.shas: dict[Path, str] = {}  # a side's worktree here -> its commit
        self.specs: dict[str, list[str] | None] = {}  # commit -> its own env's spec
        self.lost: list[str] = []  # arms retried after a lost worker

    @classmethod
    def start(cls, address: str | None, repo: git.Repo, backends: list[str]) -> RayExecutor:
        _connect(address)
        nodes = _alive()
        pin = {n["NodeID"]: NodeAffinitySchedulingStrategy(n["NodeID"], soft=False) for n in nodes}
        probes = {
            nid: _facts.options(num_cpus=0, scheduling_strategy=s).remote()
            for nid, s in pin.items()
        }
        try:
            facts = dict(zip(probes, ray.get(list(probes.values()), timeout=600), strict=True))
        except ray.exceptions.RayError as e:
            raise BadInput(
                f"the Ray workers could not run the gate runner's code ({_why(e)}); when you "
                "start Ray yourself, pass runtime_env={'py_modules': [<the gates folder>]}"
            ) from None
        kinds = {gpu: kinds_of(nodes, facts, gpu) for gpu in (False, True)}
        gpu_backends = sorted(set(backends) & set(GPU_BACKENDS))
        if gpu_backends and not kinds[True]:
            where = address or "the local Ray instance"
            raise BadInput(
                f"{where}: no node with a GPU: the matrix's {', '.join(gpu_backends)} arms need one"
            )
        return cls(address, repo, kinds, bool(gpu_backends))

    def bind(self, sides: dict[str, refs.Side], side_envs: dict[str, envs.Env]) -> None:
        """Learn each side's commit and environment (what a worker must make)."""
        for s in sides.values():
            e = side_envs.get(s.name)
            self.specs[s.sha] = e.spec if e is not None and e.kind == "own" else None
            if s.worktree is not None:
                self.shas[s.worktree] = s.sha

    def _kind(self, config: ArmConfig) -> tuple[bool, Kind]:
        """The kind of node an arm runs on: one per configuration group."""
        gpu = config.backend in GPU_BACKENDS
        ks = self.kinds[gpu]
        if len(ks) == 1:
            return gpu, ks[0]
        arm = Arm("head", config.canonical())
        group = (truth_of(arm) or arm).config_json
        slots = [k for k in ks for _ in range(k.capacity)]
        return gpu, slots[int(hashlib.sha256(group.encode()).hexdigest()[:12], 16) % len(slots)]

    def fingerprint(self, arm: Arm) -> str:
        return self._kind(arm.config)[1].fp

    def _options(self, gpu: bool, kind: Kind) -> dict[str, object]:
        """Ray's options for a task (``.options(**opts)``): CPUs, GPUs, the node pinned."""
        opts: dict[str, object] = {"num_cpus": 1, "num_gpus": 1 if gpu else 0}
        if len(self.kinds[gpu]) > 1:  # pin to a node of the arm's kind, still alive, in turn
            alive = {n["NodeID"] for n in _alive()}
            nodes = [n for n in kind.nodes if n in alive] or kind.nodes
            node = nodes[kind.turn % len(nodes)]
            kind.turn += 1
            opts["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node, soft=False)
        return opts

    def capabilities(self, side: refs.Side, env: envs.Env) -> tuple[Capabilities | None, str]:
        opts = self._options(self.gpu, self.kinds[self.gpu][0])
        spec = env.spec if env.kind == "own" else None
        ref = _capabilities.options(**opts).remote(self.shipper.commit(side.sha), spec)
        try:
            caps, why = ray.get(ref)
        except ray.exceptions.RayError as e:
            return None, f"a Ray worker could not ask the engine: {_why(e)}"
        return caps, why

    def _submit(self, job: ArmJob) -> Any:
        sha = self.shas.get(job.worktree) or git.Repo(job.worktree).head.commit.hexsha
        payload = self.shipper.payload(job, sha, self.specs.get(sha))
        gpu, kind = self._kind(job.config)
        return _arm.options(**self._options(gpu, kind)).remote(payload, gpu)

    def run_all(
        self,
        jobs: list[ArmJob],
        workers: int,
        on_done: Callable[[ArmJob, ArmRun, bool], None],
        progress: Progress | None = None,
        devices: list[str] | None = None,
        st: Store | None = None,
    ) -> None:
        """Submit every job not in the store; take results as they come; retry a lost one."""
        live: dict[Any, tuple[ArmJob, list[str]]] = {}
        with _interruptible():
            try:
                for job in jobs:
                    hit = stored_run(st, job.key)
                    if hit is not None:  # another gate run on this cache published it
                        self._done(job, hit, True, on_done, progress)
                    else:
                        live[self._submit(job)] = (job, [])
                while live:
                    ready, _ = ray.wait(list(live), num_returns=1)
                    job, lost = live.pop(ready[0])
                    run = self._outcome(ready[0], job, lost)
                    if run is None:
                        live[self._submit(job)] = (job, lost)
                    else:
                        self._done(job, run, False, on_done, progress)
            except BaseException:
                for ref in live:
                    with contextlib.suppress(Exception):
                        ray.cancel(ref, force=True)
                raise

    @staticmethod
    def _done(
        job: ArmJob, run: ArmRun, cached: bool, on_done: Callable, progress: Progress | None
    ) -> None:
        on_done(job, run, cached)
        if progress:
            progress.update(job.label, run, cached)

    def _outcome(self, ref: Any, job: ArmJob, lost: list[str]) -> ArmRun | None:
        """The arm's result; None: its worker was lost for the first time (submit again)."""
        try:
            return ray.get(ref)
        except ray.exceptions.TaskCancelledError:
            raise
        except ray.exceptions.RayTaskError as e:  # the harness failed on the worker
            return ArmRun(Status.CRASHED, reason=f"the Ray task failed: {_why(e)}")
        except ray.exceptions.RayError as e:  # the worker or its node was lost
            lost.append(_why(e))
            if len(lost) == 1:
                self.lost.append(job.label)
                print(f"[gates] {job.label}: Ray worker lost, retrying once", file=sys.stderr)
                return None
            why = "; then ".join(lost)
            return ArmRun(Status.CRASHED, reason=f"its Ray worker was lost twice: {why}")

    def speed(
        self, sides: dict[str, refs.Side], model: Path, backend: str, spec: SpeedSpec
    ) -> SpeedRun:
        """The speed blocks on one worker of the primary kind: base and head on one GPU."""
        commits = {k: self.shipper.commit(s.sha) for k, s in sides.items()}
        specs = {k: self.specs.get(s.sha) for k, s in sides.items()}
        gpu = backend in GPU_BACKENDS
        opts = self._options(gpu, self.kinds[gpu][0])
        asset = self.shipper.asset(model)
        try:
            return ray.get(_speed.options(**opts).remote(commits, specs, asset, backend, spec))
        except ray.exceptions.RayError as e:
            return SpeedRun(Status.COULD_NOT_RUN, f"on Ray: {_why(e)}", spec=spec)

    def run_info(self) -> ExecutorFacts:
        """The receipt's machine: the kind the arms ran on, and where that is."""
        ks = self.kinds[self.gpu]
        hosts = sorted({h for k in ks for h in k.hosts})
        shown = ", ".join(hosts[:8]) + (", …" if len(hosts) > 8 else "")
        where = f"arms as Ray tasks on {self.address or 'a local Ray instance'}: "
        where += f"{len(hosts)} node(s) ({shown}), {len(ks)} kind(s) of machine"
        if len(ks) > 1:
            where += " (base and head of one configuration on one kind; the machine above is "
            where += "the largest kind)"
        if self.lost:
            where += f"; {len(self.lost)} arm(s) retried after a lost worker"
        info: JsonObject = {
            "kind": "ray",
            "address": self.address,
            "hosts": hosts,
            "kinds": [{"fingerprint": k.fp, "hosts": k.hosts, "capacity": k.capacity} for k in ks],
            "retried": list(self.lost),
        }
        machine = {**ks[0].machine, "executor": where}
        return ExecutorFacts(machine, ks[0].fp, info)
