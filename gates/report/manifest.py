"""The evaluate and report phases of a run (or of merged shards): arm results -> gates ->
the manifest, its verdict, and the receipt written beside it."""

from __future__ import annotations

import datetime as dt
import tempfile
from pathlib import Path

from gates import HARNESS_VERSION, BadInput
from gates.judge.checks import equality
from gates.judge.evaluate import evaluate
from gates.plan import matrix
from gates.plan.inputs import Inputs
from gates.plan.planned import Arm
from gates.report import accept
from gates.report.receipt import render, schema
from gates.report.view import Manifest
from gates.run import envs, validate
from gates.run.info import RunInfo
from gates.run.results import ArmResult, ArmRun


def receipts_writable(out_dir: Path) -> None:
    """Refuse an --out where the receipt could not be written, before any arm runs."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out_dir, prefix=".probe-"):
            pass
    except OSError as e:
        why = e.strerror or e
        raise BadInput(f"--out {out_dir}: cannot write a receipt there ({why})") from None


def report(
    inp: Inputs,
    run_info: RunInfo,
    rows: list[ArmResult],
    results: dict[Arm, ArmRun],
    ran: int,
    out_dir: Path,
    wall_s: float,
) -> int:
    """The evaluate and report phases: arm results -> gates -> manifest and receipt."""
    m, the_plan = inp.m, inp.the_plan
    arm_rows = dict(zip(the_plan.arms, rows, strict=True))
    decoders = {n: equality.make_decoder(p) for n, p in inp.models.items()}
    gates_out = evaluate(m, the_plan, results, arm_rows, inp.sets, decoders)
    manifest = {
        "schema": schema.SCHEMA,
        "harness_version": HARNESS_VERSION,
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "repo": str(inp.root),
        "base": run_info.base.to_json(),
        "head": run_info.head.to_json(),
        "merge_base": run_info.merge_base,
        "machine": run_info.machine,
        "fingerprint": run_info.fingerprint,
        "matrix": {
            "path": inp.matrix_rel,
            "name": m.name,
            "description": m.description,
            "arms": len(the_plan.arms),
            "cached": sum(1 for r in rows if r.cached),
            "ran": ran,
            "not_comparable": sum(1 for r in rows if r.not_comparable),
            "backend": m.axes["backend"],
            "model": m.axes["model"],
            "prompts": m.axes["prompts"],
            "columns": matrix.column_axis(m),
            "workers": run_info.workers,
            "devices": run_info.devices,
        },
        "gates": [g.to_json() for g in gates_out],
        "notes": the_plan.notes + run_info.notes,
        "bad_values": validate.values_run_nowhere(m, rows),
        "speed": run_info.speed,
        "lean": run_info.lean,
        "environments": None
        if run_info.environments is None
        else envs.to_json(run_info.environments),
        "arms": [r.to_json() for r in rows],
        "command": run_info.command,
        "wall_s": round(wall_s, 1),
    }
    if run_info.shards is not None:
        manifest["shards"] = run_info.shards
    accept.apply(manifest, run_info.accepted)
    verdict, code = render.verdict(Manifest.parse(manifest))
    manifest["verdict"], manifest["exit_code"] = verdict, code
    md_path, _ = render.write(manifest, out_dir)
    print(render.summary(Manifest.parse(manifest), md_path))
    return code
