"""``python -m gates run --shard i/n``: run one part of a matrix and write a shard manifest.

Arms are split by a stable index: the arms of the plan, in plan order, are grouped by their
config without the side (so base and head of one config run on one machine, and share a run
when their engine trees are equal), and an oracle/noisy drafter arm joins the group of its plain
twin, whose replies it is fed. Group k belongs to shard ``k mod n + 1``. A shard manifest keeps
each of its arms' full results, so ``python -m gates merge`` (gates/report/merge.py) can evaluate
the gates over all shards on a machine that runs nothing.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

from gates import HARNESS_VERSION
from gates.plan import hashes
from gates.plan.build import Arm
from gates.plan.inputs import Inputs
from gates.run import store
from gates.run.arms import ArmRunner, truth_of
from gates.run.info import RunInfo

KIND = "gates-shard"


def parse(text: str) -> tuple[int, int]:
    """``"i/n"`` -> (i, n), 1 <= i <= n; ValueError otherwise."""
    i, sep, n = text.partition("/")
    if not sep or not i.strip().isdigit() or not n.strip().isdigit():
        raise ValueError(f"{text!r} is not i/n (for example 1/2)")
    a, b = int(i), int(n)
    if not 1 <= a <= b:
        raise ValueError(f"{text!r}: i must be between 1 and n")
    return a, b


def group_index(arms: list[Arm]) -> dict[Arm, int]:
    """Each arm's stable index: the order of first appearance of its group in the plan."""
    groups: dict[str, int] = {}
    out = {}
    for a in arms:
        root = truth_of(a) or a
        out[a] = groups.setdefault(root.config_json, len(groups))
    return out


def select(arms: list[Arm], i: int, n: int) -> list[Arm]:
    """The arms of shard i of n, in plan order."""
    index = group_index(arms)
    return [a for a in arms if index[a] % n == i - 1]


def file_name(run_info: RunInfo, matrix_name: str, i: int, n: int) -> str:
    name = "".join(c if c.isalnum() or c in "-_" else "-" for c in matrix_name)
    base, head = run_info.base.sha[:10], run_info.head.sha[:10]
    return f"{base}..{head}.{name}.shard-{i}-of-{n}.json"


def write(
    out_dir: Path,
    part: tuple[int, int],
    inp: Inputs,
    run_info: RunInfo,
    runner: ArmRunner,
    arms: list[Arm],
    wall_s: float,
) -> Path:
    """Write the shard manifest of ``arms`` (rows and full results) into ``out_dir``."""
    i, n = part
    position = {a: k for k, a in enumerate(inp.the_plan.arms)}
    doc = {
        "kind": KIND,
        "harness_version": HARNESS_VERSION,
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "shard": [i, n],
        "matrix": {
            "path": inp.matrix_rel,
            "name": inp.m.name,
            "sha256": hashes.hash_file(inp.mpath),
            "arms": len(inp.the_plan.arms),
        },
        "fixtures": inp.fixtures,
        "run": run_info.to_json(),
        "notes": inp.the_plan.notes,
        "ran": runner.ran,
        "wall_s": round(wall_s, 1),
        "arms": [
            {
                "index": position[a],
                "id": a.id,
                "row": runner.rows[a].to_json(),
                "result": r.to_json() if (r := runner.results.get(a)) is not None else None,
            }
            for a in arms
        ],
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / file_name(run_info, inp.m.name, i, n)
    store.write_atomic(path, json.dumps(doc, default=str) + "\n")
    return path


def line(path: Path, runner: ArmRunner, arms: list[Arm]) -> str:
    """The one line a shard run prints."""
    cached = sum(1 for a in arms if runner.rows[a].cached)
    bad = sum(1 for a in arms if a in runner.results and not runner.results[a].ok)
    return (
        f"Shard: {len(arms)} arms ({cached} cached, {runner.ran} run, {bad} did not finish ok); "
        f"join the shards with `python -m gates merge`: {path}"
    )
