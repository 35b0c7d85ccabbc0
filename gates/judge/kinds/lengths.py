"""``lengths: {commits?}``: every reply of every planned arm the rule selects keeps to its
``max_tokens``: at most that many generated ids, and exactly that many when it says it
stopped for ``length``.

The equality gates compare arms with each other, so an engine that generates one token
too many (or stops one short and calls it ``length``) on every arm, base and head alike,
passes them all; this rule reads each arm on its own against the request it was sent.
"""

from __future__ import annotations

from dataclasses import dataclass

from gates.judge.kinds.kind import Kind
from gates.judge.results import CheckOutcome
from gates.plan.planned import Arm, ArmCheck, Check, Plan
from gates.plan.prompts import requests_for
from gates.plan.request import PromptRequest
from gates.plan.rule import Gate, Sets, Source, check_planned_arms
from gates.run.results import ArmRun

SHOWN = 3  # replies named in a failing entry; the rest are counted
UNMEASURED = ("error", "cancelled")  # an error has no ids; a cancel stops early by design


def problems(run: ArmRun, requests: dict[str, PromptRequest], default: int) -> list[str]:
    """Each reply whose generated ids break its request's ``max_tokens`` (``default`` for a
    request that names none, as the harness sends it)."""
    out = []
    for r in run.replies or []:
        req = requests.get(r.id)
        finish = r.finish_reason
        if finish in UNMEASURED or (req is not None and req.kind == "embed"):
            continue
        given = req.max_tokens if req is not None else None
        n, limit = len(r.ids), default if given is None else given
        if n > limit:
            out.append(f"`{r.id}`: {n} tokens, max_tokens {limit}")
        elif finish == "length" and n != limit:
            out.append(f"`{r.id}`: stopped for length after {n} of {limit} tokens")
    return out


@dataclass(frozen=True)
class Lengths(Kind):
    KEY = "lengths"
    UNIT = "arms"
    LAST = True  # reads the arms every other rule planned

    @classmethod
    def parse(cls, src: Source) -> Gate:
        src.only({"commits"})
        return Gate(src.name, src.where, src.sides(("head",)), cls())

    def plan(self, gate: Gate, plan: Plan, sets: Sets) -> None:
        check_planned_arms(gate, plan)

    def judge(self, check: Check, runs: dict[Arm, ArmRun], sets: Sets) -> CheckOutcome:
        assert isinstance(check, ArmCheck)
        cfg, run = check.arm.config, runs[check.arm]
        # the lines the arm was sent, first turns of a resumed arm included (`conv2/turn1`
        # carries its own request's max_tokens, not the matrix's)
        sent = requests_for(sets.get(cfg.prompts, []), cfg.max_tokens, resumed=True)
        requests = {r.id: r for r in sent}
        found = problems(run, requests, cfg.max_tokens)
        values = {"replies": len(run.replies or [])}
        if not found:
            return CheckOutcome(True, values)
        more = f" (and {len(found) - SHOWN} more)" if len(found) > SHOWN else ""
        return CheckOutcome(False, values, ["; ".join(found[:SHOWN]) + more])
