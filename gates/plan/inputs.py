"""The plan phase's inputs: what a run reads from the working tree (the matrix, its prompt
sets and models, their hashes) and the plan built from them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gates import BadInput
from gates.plan import build as plan
from gates.plan import hashes, matrix, prompts
from gates.plan.rule import Kinds, Sets


def _matrix_path(root: Path, name: str) -> Path:
    """A matrix path: absolute, under the repository root, under the cwd, or a bare name."""
    p = Path(name)
    if p.is_absolute():
        return p
    for candidate in (root / p, Path.cwd() / p, root / "matrices" / f"{name}.yaml"):
        if candidate.is_file():
            return candidate
    return root / p


def rel(root: Path, p: Path) -> str:
    try:
        return str(p.resolve().relative_to(root.resolve()))
    except ValueError:
        return str(p)


@dataclass
class Inputs:
    """What a run reads from the working tree: the matrix, its prompt sets and models, the plan."""

    root: Path
    mpath: Path
    m: matrix.Matrix
    sets: Sets
    models: dict[str, Path]
    the_plan: plan.Plan
    fixtures: dict[str, str]

    @property
    def matrix_rel(self) -> str:
        return rel(self.root, self.mpath)


def _model_keys(m: matrix.Matrix) -> list[tuple[str, str]]:
    """(the key that names it, model directory) of every model the matrix uses."""
    key = m.keys.get("model", "model")
    out = [
        (f"{key}[{i}]" if key.startswith("axes.") else key, name)
        for i, name in enumerate(m.axes["model"])
    ]
    return out + [(f"drafter_models.{d}", name) for d, name in m.drafter_models.items()]


def load_inputs(root: Path, matrix_name: str, kinds: Kinds) -> Inputs:
    """The plan phase: matrix, prompt sets, model folders, fixture hashes, arms and comparisons
    (``kinds``: the gate kinds the matrix's rules may be)."""
    mpath = _matrix_path(root, matrix_name)
    m = matrix.load(mpath, kinds)
    sets = {name: prompts.load(prompts.resolve_path(root, name)) for name in m.prompt_sets()}
    models = {}
    for key, name in _model_keys(m):
        p = Path(name) if Path(name).is_absolute() else root / name
        if not p.is_dir():
            raise BadInput(f"{mpath}: {key}: {name!r} is not a directory under {root}")
        models[name] = p
    fixtures = {f"model:{n}": hashes.hash_dir(p) for n, p in models.items()}
    fixtures.update({f"prompts:{n}": hashes.hash_file(prompts.resolve_path(root, n)) for n in sets})
    return Inputs(root, mpath, m, sets, models, plan.build(m, sets), fixtures)
