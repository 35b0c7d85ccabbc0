"""The matrix's derived views at their edges: `exclude` patterns, the points they leave, the
scalars an arm takes, the prompt sets gates ask for and the receipt's column axis.

Written after a mutation run of gates/matrix.py (now gates/plan/matrix.py; docs/testing.md)
left every mutant of `_exclude`, `points`, `arm_keys`, `prompt_sets` and `column_axis`
alive: the bundled matrices use none of these edges."""

from __future__ import annotations

from pathlib import Path

import pytest

from gates import BadInput
from gates.judge.kinds import KINDS
from gates.plan import matrix

GATE = "gates:\n  - name: g\n    across_commits: {}\n"


def load(tmp_path: Path, text: str) -> matrix.Matrix:
    p = tmp_path / "m.yaml"
    p.write_text(text)
    return matrix.load(p, KINDS)


def refused(tmp_path: Path, text: str, key: str, expected: str, got: str) -> None:
    """Loading `text` fails with one line naming the file, the key, what was expected and
    what was given."""
    with pytest.raises(BadInput) as err:
        load(tmp_path, text)
    message = str(err.value)
    assert f"m.yaml: {key}: expected {expected}" in message, message
    assert message.endswith(f", got {got}"), message


def test_exclude_leaves_out_exactly_the_points_that_match_every_axis(tmp_path: Path) -> None:
    m = load(
        tmp_path,
        "model: m\nprompts: p\naxes:\n  kv: [bf16, fp8]\n  parallel: [1, 2, 4]\n"
        "exclude:\n  - {kv: fp8, parallel: [2, 4]}\n  - {parallel: 1, kv: [bf16]}\n" + GATE,
    )
    assert m.exclude == [{"kv": ["fp8"], "parallel": [2, 4]}, {"parallel": [1], "kv": ["bf16"]}]
    kept = [(p.kv, p.parallel) for p in m.points()]
    assert kept == [("bf16", 2), ("bf16", 4), ("fp8", 1)]
    assert all(
        p.blas is None and all(p.value(a) is not None for a in matrix.AXES) for p in m.points()
    )


def test_without_exclude_every_point_of_the_product_is_kept(tmp_path: Path) -> None:
    m = load(
        tmp_path, "model: m\nprompts: p\naxes:\n  kv: [bf16, fp8]\n  parallel: [1, 8]\n" + GATE
    )
    assert m.exclude == []
    assert [(p.kv, p.parallel) for p in m.points()] == [
        ("bf16", 1), ("bf16", 8), ("fp8", 1), ("fp8", 8),
    ]  # fmt: skip


def test_a_pattern_on_one_axis_excludes_across_the_others(tmp_path: Path) -> None:
    m = load(
        tmp_path,
        "model: m\nprompts: p\naxes:\n  kv: [bf16, fp8]\n  paging: [off, on]\n"
        "exclude:\n  - {paging: on}\n" + GATE,
    )
    assert [(p.kv, p.paging) for p in m.points()] == [("bf16", "off"), ("fp8", "off")]


@pytest.mark.parametrize(
    ("exclude", "key", "expected", "got"),
    [
        ("exclude: {kv: fp8}\n", "exclude", "a list of patterns", "{'kv': 'fp8'}"),
        ("exclude: [fp8]\n", "exclude[0]", "a non-empty mapping of axis -> values", "'fp8'"),
        ("exclude: [{}]\n", "exclude[0]", "a non-empty mapping of axis -> values", "{}"),
        (
            "exclude: [{kv: bf16}, {colour: red}]\n",
            "exclude[1].colour",
            "an axis (model, ",
            "'colour'",
        ),
        ("exclude: [{kv: fp4}]\n", "exclude[0].kv", "a value of kv (bf16, fp8)", "'fp4'"),
        (
            "exclude: [{parallel: [1, 3]}]\n",
            "exclude[0].parallel",
            "a value of parallel (1, 2)",
            "3",
        ),
        ("exclude: [{kv: []}]\n", "exclude[0].kv", "a non-empty list", "[]"),
    ],
)
def test_a_bad_exclude_names_its_pattern_and_axis(
    tmp_path: Path, exclude: str, key: str, expected: str, got: str
) -> None:
    text = "model: m\nprompts: p\naxes:\n  kv: [bf16, fp8]\n  parallel: [1, 2]\n" + exclude + GATE
    refused(tmp_path, text, key, expected, got)


def test_arm_keys_are_the_engine_knobs_that_are_set() -> None:
    assert matrix.Scalars().arm_keys() == {"max_tokens": 16, "pages": 256}
    s = matrix.Scalars(context=0, step_rows=64, share=0.5, timeout=5, columns="kv")
    assert s.arm_keys() == {
        "max_tokens": 16, "context": 0, "pages": 256, "step_rows": 64, "share": 0.5,
    }  # fmt: skip


def test_prompt_sets_are_the_axis_then_each_set_a_gate_asks_once(tmp_path: Path) -> None:
    m = load(
        tmp_path,
        "model: m\naxes:\n  prompts: [p, q]\ngates:\n  - name: g\n    across_commits: {}\n"
        "  - name: h\n    schedule: {prompts: r, parallel: 2, priority_inversions: 0}\n"
        "  - name: i\n    schedule_across_commits: {prompts: q, parallel: 2}\n"
        "  - name: j\n    schedule: {prompts: r, parallel: 3, priority_inversions: 0}\n"
        "  - name: k\n    schedule: {prompts: s, parallel: 2, priority_inversions: 0}\n",
    )
    assert m.prompt_sets() == ["p", "q", "r", "s"]


@pytest.mark.parametrize(
    ("axes", "columns", "want"),
    [
        ("kv: [bf16]\n  backend: [numpy]", "", None),
        ("kv: [bf16, fp8]\n  backend: [numpy, mlx]", "", "kv"),
        ("kv: [bf16]\n  backend: [numpy, mlx]\n  model: [m, n]", "", "backend"),
        ("kv: [bf16]\n  model: [m, n]\n  prompts: [p, q]", "", "model"),
        ("kv: [bf16]\n  prompts: [p, q]\n  parallel: [1, 2]", "", "prompts"),
        ("kv: [bf16]\n  parallel: [1, 2]", "", None),
        ("kv: [bf16, fp8]", "columns: parallel\n", "parallel"),
    ],
)
def test_the_column_axis_is_the_choice_else_the_first_that_varies(
    tmp_path: Path, axes: str, columns: str, want: str | None
) -> None:
    top = "" if "model:" in axes else "model: m\n"
    top += "" if "prompts:" in axes else "prompts: p\n"
    m = load(tmp_path, top + columns + f"axes:\n  {axes}\n" + GATE)
    assert m.column_axis() == want
    assert matrix.column_axis(m) == want


def speed_of(tmp_path: Path, section: str) -> object:
    return load(tmp_path, "model: m\nprompts: p\n" + GATE + section).speed


@pytest.mark.parametrize(
    ("section", "key", "expected", "got"),
    [
        ("speed: 3\n", "speed", "a mapping", "3"),
        ("speed: {colour: red}\n", "speed.colour", "one of parallel, prompt_tokens", "'colour'"),
        ("speed: {blocks: 2.5}\n", "speed.blocks", "a int", "2.5"),
        ("speed: {blocks: true}\n", "speed.blocks", "a int", "True"),
        ("speed: {alpha: true}\n", "speed.alpha", "a float", "True"),
        ("speed: {metrics: [joules]}\n", "speed.metrics", "a list of ", "['joules']"),
        ("speed: {metrics: []}\n", "speed.metrics", "a list of ", "[]"),
        ("speed: {parallel: [1, 0]}\n", "speed.parallel[1]", "a positive integer", "0"),
        ("speed: {runs: 0}\n", "speed.runs", "at least 1", "0"),
        ("speed: {blocks: 0}\n", "speed.blocks", "at least 1", "0"),
        ("speed: {turn: 0}\n", "speed.turn", "at least 1", "0"),
        ("speed: {budget_s: 0}\n", "speed.budget_s", "at least 1", "0"),
        ("speed: {add_blocks: -1}\n", "speed.add_blocks", "at least 0", "-1"),
        ("speed: {sample_per: run}\n", "speed.sample_per", "one of block, repeat", "'run'"),
        ("speed: {alpha: 1}\n", "speed.alpha", "a fraction in [0, 1)", "1.0"),
        ("speed: {delta: -0.1}\n", "speed.delta", "a fraction in [0, 1)", "-0.1"),
        ("speed: {min_effect: 1.5}\n", "speed.min_effect", "a fraction in [0, 1)", "1.5"),
        ("speed: {quantile: 0}\n", "speed.quantile", "a fraction in (0, 1)", "0.0"),
        ("speed: {quantile: 1}\n", "speed.quantile", "a fraction in (0, 1)", "1.0"),
    ],
)
def test_a_bad_speed_section_names_the_key(
    tmp_path: Path, section: str, key: str, expected: str, got: str
) -> None:
    refused(tmp_path, "model: m\nprompts: p\n" + GATE + section, key, expected, got)


def test_speed_defaults_and_the_older_keys(tmp_path: Path) -> None:
    from gates.plan.speed import SpeedSpec

    assert speed_of(tmp_path, "") is None
    assert speed_of(tmp_path, "speed: {}\n") == SpeedSpec()
    spec = speed_of(tmp_path, "speed: {runs: 5, max_ratio_drop: 0.1, alpha: 0}\n")
    assert (spec.blocks, spec.delta, spec.alpha) == (3, 0.1, 0.0)  # ceil(5 / 2) blocks
    assert isinstance(spec.alpha, float)
    spec = speed_of(tmp_path, "speed: {runs: 5, blocks: 7, max_ratio_drop: 0.1, delta: 0.2}\n")
    assert (spec.blocks, spec.delta) == (7, 0.2)  # the new keys win
    spec = speed_of(tmp_path, "speed: {blocks: 50, max_blocks: 10, parallel: [4]}\n")
    assert (spec.blocks, spec.max_blocks, spec.parallel) == (50, 50, (4,))
    spec = speed_of(tmp_path, "speed: {runs: 1, quantile: 0.9, add_blocks: 0}\n")
    assert (spec.blocks, spec.quantile, spec.add_blocks) == (1, 0.9, 0)


@pytest.mark.parametrize(
    ("line", "key", "expected", "got"),
    [
        ("share: 0\n", "share", "a number > 0", "0.0"),
        ("share: -1.5\n", "share", "a number > 0", "-1.5"),
        ("share: many\n", "share", "a number > 0", "'many'"),
        ("share: true\n", "share", "a number > 0", "True"),
        ("pages: 0\n", "pages", "a positive integer", "0"),
        ("context: -3\n", "context", "a positive integer", "-3"),
        ("step_rows: 1.5\n", "step_rows", "a int", "1.5"),
        ("max_tokens: true\n", "max_tokens", "a int", "True"),
        ("columns: colour\n", "columns", "an axis (model, ", "'colour'"),
        ("columns: 3\n", "columns", "a str", "3"),
    ],
)
def test_a_bad_scalar_names_its_key(
    tmp_path: Path, line: str, key: str, expected: str, got: str
) -> None:
    refused(tmp_path, "model: m\nprompts: p\n" + line + GATE, key, expected, got)


def test_scalars_take_their_defaults_and_edges(tmp_path: Path) -> None:
    m = load(tmp_path, "model: m\nprompts: p\n" + GATE)
    assert m.scalars == matrix.Scalars()
    m = load(tmp_path, "model: m\nprompts: p\nshare: 2\npages: 1\nstep_rows: 1\n" + GATE)
    assert (m.scalars.share, m.scalars.pages, m.scalars.step_rows) == (2.0, 1, 1)
    assert isinstance(m.scalars.share, float)
    m = load(tmp_path, "model: m\nprompts: p\nshare: 0.25\ncolumns: parallel\n" + GATE)
    assert (m.scalars.share, m.scalars.columns) == (0.25, "parallel")


@pytest.mark.parametrize(
    ("axes", "key", "expected", "got"),
    [
        ("axes: [kv]\n", "axes", "a mapping of axis -> list of values", "['kv']"),
        ("axes: {colour: [red]}\n", "axes.colour", "an axis (model, backend, ", "'colour'"),
    ],
)
def test_a_bad_axes_section_names_the_axis(
    tmp_path: Path, axes: str, key: str, expected: str, got: str
) -> None:
    refused(tmp_path, "model: m\nprompts: p\n" + axes + GATE, key, expected, got)


def test_name_description_and_drafter_models(tmp_path: Path) -> None:
    m = load(tmp_path, "model: m\nprompts: p\n" + GATE)
    assert (m.name, m.description, m.drafter_models) == ("m", "", {})  # the file's stem
    m = load(
        tmp_path,
        "name: nightly\ndescription: every arm\nmodel: m\nprompts: p\n"
        "drafter_models: {block: fixtures/models/tiny-qwen3-block}\n" + GATE,
    )
    assert (m.name, m.description) == ("nightly", "every arm")
    assert m.drafter_models == {"block": "fixtures/models/tiny-qwen3-block"}


@pytest.mark.parametrize(
    ("text", "key", "expected", "got"),
    [
        ("model: m\nprompts: p\ngates: {}\n", "gates", "a non-empty list of gates", "{}"),
        ("model: m\nprompts: p\ngates: []\n", "gates", "a non-empty list of gates", "[]"),
        (
            "model: m\nprompts: p\n" + GATE + "  - name: g\n    across_commits: {}\n",
            "gates[1].name",
            "a name not used by another gate",
            "'g'",
        ),
        (
            "model: m\nprompts: p\ndrafter_models: {block: 3}\n" + GATE,
            "drafter_models",
            "a mapping of drafter name -> directory",
            "{'block': 3}",
        ),
        (
            "model: m\nprompts: p\ndrafter_models: {block: ''}\n" + GATE,
            "drafter_models",
            "a mapping of drafter name -> directory",
            "{'block': ''}",
        ),
    ],
)
def test_bad_gates_and_drafter_models_name_what_was_given(
    tmp_path: Path, text: str, key: str, expected: str, got: str
) -> None:
    refused(tmp_path, text, key, expected, got)


def test_an_unreadable_or_broken_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(BadInput) as err:
        matrix.load(tmp_path / "missing.yaml", KINDS)
    assert (
        str(err.value)
        == f"{tmp_path / 'missing.yaml'}: cannot read matrix: No such file or directory"
    )
    with pytest.raises(BadInput) as err:
        load(tmp_path, "model: m\nprompts: [p\n")
    message = str(err.value)
    assert message.startswith(f"{tmp_path / 'm.yaml'}: not valid YAML (line 3, column 1): ")
    assert "\n" not in message


@pytest.mark.parametrize(
    ("text", "key", "expected", "got"),
    [
        ("[1, 2]\n", "(top level)", "a mapping", "[1, 2]"),
        ("model: m\nprompts: p\nbogus: 1\n" + GATE, "bogus", "one of axes, backend, ", "'bogus'"),
        (
            "model: m\nprompts: p\naxes: {model: [n]}\n" + GATE,
            "axes.model",
            "model either at the top level or in axes",
            "['n']",
        ),
        (
            "model: m\nprompts: p\naxes: {kv: bf16}\n" + GATE,
            "axes.kv",
            "a list of values",
            "'bf16'",
        ),
        ("model: m\nprompts: p\nparallel: 0\n" + GATE, "parallel", "a positive integer", "0"),
    ],
)
def test_top_level_and_axis_refusals_name_what_was_given(
    tmp_path: Path, text: str, key: str, expected: str, got: str
) -> None:
    refused(tmp_path, text, key, expected, got)


def test_a_yaml_error_says_why(tmp_path: Path) -> None:
    with pytest.raises(BadInput) as err:
        load(tmp_path, "model: m\nprompts: [p\n")
    assert str(err.value).endswith("): expected ',' or ']', but got '<stream end>'")
    with pytest.raises(BadInput) as err:  # an error with no position: its first line
        load(tmp_path, "model: m\n\tprompts: p\n")
    assert "not valid YAML" in str(err.value) and "\n" not in str(err.value)
