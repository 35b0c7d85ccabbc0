"""Arm results -> gate results: one entry per comparison or resource check, then cells.

Entry and gate states: ``pass``, ``fail``, ``could_not_run`` (an arm it needs crashed or
timed out), ``not_comparable`` (an arm it needs asks for something that commit's engine
lacks). A gate fails if any entry fails; otherwise it could not run if any entry could
not run; otherwise it holds if any entry held.
"""

from __future__ import annotations

from dataclasses import dataclass

from gates.judge.checks import equality
from gates.judge.kinds import kind_of
from gates.judge.results import ORDER, Cell, Comparison, GateResult, worst
from gates.plan import build as plan
from gates.plan.arm_config import ArmConfig
from gates.plan.build import Arm, Check, PairCheck, Plan
from gates.plan.matrix import Gate, Matrix
from gates.plan.request import PromptRequest
from gates.plan.rule import Sets
from gates.run.results import ArmResult, ArmRun, Status

MAX_DIFFS = 5  # per comparison, kept in the manifest


def pair_names(a: Arm, b: Arm) -> tuple[str, str]:
    """Short names of the two sides of a comparison (base/head, serial/p=4, ...)."""
    if a.side != b.side:
        return a.side, b.side
    ca, cb = a.config, b.config
    if ca.served != cb.served:
        return (
            f"served {ca.served}" if ca.served else "offline",
            f"served {cb.served}" if cb.served else "offline",
        )
    if ca.resumed != cb.resumed:
        return (
            "resumed" if ca.resumed else "cold",
            "resumed" if cb.resumed else "cold",
        )
    if ca.serial != cb.serial:
        return (
            "serial" if ca.serial else f"p={ca.parallel}",
            "serial" if cb.serial else f"p={cb.parallel}",
        )
    ja, jb = ca.to_json(), cb.to_json()
    diff = [k for k in sorted(ja) if ja[k] != jb.get(k)]
    if not diff:
        return "a", "b"

    def show(c: ArmConfig) -> str:
        return " ".join(f"{k}={c.value(k) if c.value(k) != {} else 'unset'}" for k in diff)

    return show(ca), show(cb)


@dataclass(frozen=True, slots=True)
class Blocked:
    """Why an entry could not be evaluated, and which arm stopped it."""

    status: Status
    reason: str
    stderr_tail: str
    arm: str
    arm_reason: str
    ran_on_other_commit: bool = False


Rows = dict[Arm, ArmResult]  # each arm's manifest row
Runs = dict[Arm, ArmRun]  # each arm's run, for the arms that have one


def _blocked(arms: tuple[Arm, ...], rows: Rows, results: Runs) -> Blocked | None:
    """Why an arm is not comparable or did not finish, or None.

    An arm the engine refused (exit 2: it will not run that configuration) is not
    comparable, unless the same arm ran on the other commit: then head (or base) lost
    something the other side has, and the comparison could not run."""
    for arm in arms:
        row = rows[arm]
        if row.status == Status.NOT_COMPARABLE:
            return Blocked(Status.NOT_COMPARABLE, row.reason, "", arm.id, row.reason)
    status = {arm: results[arm].status if arm in results else None for arm in arms}
    for arm in arms:
        r = results.get(arm)
        if r is None:
            why = "no result (interrupted?)"
            return Blocked(Status.COULD_NOT_RUN, f"{arm.id}: {why}", "", arm.id, why)
        if r.status == Status.REFUSED:
            others = [a for a in arms if a is not arm]
            lost = any(status[a] == Status.OK and a.side != arm.side for a in others)
            why = f"{arm.id} — {r.reason}" + (" (the other commit ran it)" if lost else "")
            state = Status.COULD_NOT_RUN if lost else Status.NOT_COMPARABLE
            return Blocked(state, why, r.stderr_tail, arm.id, r.reason, lost)
    for arm in arms:
        r = results[arm]
        if not r.ok:
            own = r.reason
            return Blocked(Status.COULD_NOT_RUN, f"{arm.id}: {own}", r.stderr_tail, arm.id, own)
    return None


def _blocked_entry(why: Blocked, column: str, **names: str) -> Comparison:
    """The entry of a comparison or check that an arm stopped (``names``: its arms)."""
    return Comparison(
        column=column,
        **names,
        status=why.status,
        reason=why.reason,
        stderr_tail=why.stderr_tail,
        blocked_arm=why.arm,
        arm_reason=why.arm_reason,
        ran_on_other_commit=why.ran_on_other_commit,
    )


def _comparison(
    c: plan.Comparison,
    rows: Rows,
    results: Runs,
    requests: dict[str, PromptRequest],
    decode: equality.Decoder | None,
) -> Comparison:
    a_name, b_name = pair_names(c.a, c.b)
    names = {"a": c.a.id, "b": c.b.id, "a_name": a_name, "b_name": b_name}
    blocked = _blocked((c.a, c.b), rows, results)
    if blocked:
        return _blocked_entry(blocked, c.column, **names)
    dropped = {**rows[c.a].dropped, **rows[c.b].dropped}
    got = equality.compare(results[c.a], results[c.b], c.only_ids, requests, decode, dropped)
    return Comparison(
        column=c.column,
        **names,
        status=Status.PASS if got.all_equal else Status.FAIL,
        matched=got.matched,
        total=got.total,
        skipped=got.skipped,
        n_diffs=len(got.diffs),
        diffs=got.diffs[:MAX_DIFFS],
    )


def _check(
    c: Check,
    rows: Rows,
    results: Runs,
    gate: Gate,
    sets: Sets,
) -> Comparison:
    """A check of one arm (resource, schedule) or of base against head (behaviour), judged
    by the gate's rule once its arms ran ok."""
    arms = (c.a, c.b) if isinstance(c, PairCheck) else (c.arm,)
    blocked = _blocked(arms, rows, results)
    if blocked:
        return _blocked_entry(blocked, c.column, arm=arms[-1].id)
    got = kind_of(gate).judge(c, results, sets)
    if got.ok is None:
        status, matched, total = Status.NOT_COMPARABLE, 0, 0
    else:
        status = Status.PASS if got.ok else Status.FAIL
        matched, total = int(got.ok), 1
    return Comparison(
        column=c.column,
        arm=arms[-1].id,
        status=status,
        reason="; ".join(got.problems),
        values=got.values,
        notice=got.notice or None,
        matched=matched,
        total=total,
    )


def _cells(entries: list[Comparison]) -> dict[str, Cell]:
    by_column: dict[str, list[Comparison]] = {}
    for e in entries:
        by_column.setdefault(e.column, []).append(e)
    cells = {}
    for col, es in by_column.items():
        states = [e.status for e in es]
        cells[col] = Cell(
            status=worst(states),
            matched=sum(e.matched for e in es),
            total=sum(e.total for e in es),
            counts={str(s): states.count(s) for s in ORDER},
        )
    return cells


def evaluate(
    m: Matrix,
    plan: Plan,
    results: Runs,
    rows: Rows,
    sets: Sets,
    decoders: dict[str, equality.Decoder | None],
) -> list[GateResult]:
    out = []
    for gate in m.gates:
        entries: list[Comparison] = []
        for c in plan.comparisons:
            if c.gate == gate.name:
                cfg = c.b.config
                reqs = {r.id: r for r in sets[cfg.prompts]}
                entries.append(_comparison(c, rows, results, reqs, decoders.get(cfg.model)))
        for rc in [*plan.checks, *plan.pairs]:
            if rc.gate == gate.name:
                entries.append(_check(rc, rows, results, gate, sets))
        facts = kind_of(gate).facts()
        out.append(
            GateResult(
                name=gate.name,
                kind=gate.kind,
                sides=list(gate.sides),
                status=worst([e.status for e in entries]),
                matched=sum(e.matched for e in entries),
                total=sum(e.total for e in entries),
                cells=_cells(entries),
                entries=entries,
                vary=facts.vary,
                reference=facts.reference,
                limits=facts.limits,
            )
        )
    return out
