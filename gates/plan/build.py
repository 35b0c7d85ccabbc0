"""Gate rules -> the arms to run and the comparisons to make between them.

An *arm* is one engine run: a commit side (base or head) and a config (the axis values
of a matrix point, plus ``serial`` and ``resumed``, plus the matrix's scalars). Arms are
deduplicated, so gates that need the same run share it. Each gate's rule plans its own
(gates/judge/kinds); what a plan holds is gates/plan/planned.py.
"""

from __future__ import annotations

from gates.plan.matrix import Matrix
from gates.plan.planned import Arm, ArmCheck, Check, Comparison, PairCheck, Plan, label
from gates.plan.rule import Sets

__all__ = ["Arm", "ArmCheck", "Check", "Comparison", "PairCheck", "Plan", "build", "label"]


def build(m: Matrix, prompt_sets: Sets) -> Plan:
    """Expand every gate of the matrix into arms and comparisons: each gate's rule plans
    its own (gates/judge/kinds), a rule that checks other rules' arms last.

    ``prompt_sets`` maps each prompts axis value to its loaded prompt set.
    """
    plan = Plan(
        m.points(),
        m.scalars.arm_keys(),
        m.drafter_models,
        m.column_axis(),
        hide={a: m.axes[a][0] for a in ("model", "backend", "prompts") if len(m.axes[a]) == 1},
    )
    for gate in m.gates:
        if not gate.rule.LAST:
            gate.rule.plan(gate, plan, prompt_sets)
    for arm in list(plan.arms):  # oracle/noisy drafters read their plain twin's replies
        cfg = arm.config
        if cfg.drafter in ("oracle", "noisy") and not cfg.drafter_model:
            plan.add(Arm(arm.side, cfg.replace(drafter="none").canonical()))
    for gate in m.gates:
        if gate.rule.LAST:
            gate.rule.plan(gate, plan, prompt_sets)
    return plan
