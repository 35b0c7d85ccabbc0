"""bench/ptx_float_ops.py's comparison on hand-written PTX (no NVRTC needed): renamed registers
and labels are the same PTX, a moved address computation keeps the float operations, and a
shuffle tree's order or an fma's constant shows as changed arithmetic."""

from __future__ import annotations

from tests.engine.bench_scripts import load_bench

tool = load_bench("ptx_float_ops")

KERNEL = """.visible .entry {name}(
\t.param .u64 p0
)
{{
\t.local .align 16 .b8 \t__local_depot{depot}[16];
\tld.shared.f32 \t%f{a}, [%rd{r}];
{extra}\tfma.rn.f32 \t%f{b}, %f{a}, %f{a}, 0f00000000;
\tmov.u32 \t%r{o}, {off};
\tshfl.sync.down.b32 \t%r{s}|%p1, %r{b}, %r{o}, 31, -1;
\tadd.f32 \t%f{c}, %f{b}, %f{s};
$L__BB{depot}_2:
\tst.global.f32 \t[%rd{r}], %f{c};
}}
"""


def _ptx(name: str = "k", depot: int = 3, regs: int = 0, off: int = 16, extra: str = "") -> str:
    a, b, c, r, o, s = (n + regs for n in (1, 2, 3, 4, 5, 6))
    return KERNEL.format(name=name, depot=depot, a=a, b=b, c=c, r=r, o=o, s=s, off=off, extra=extra)


def _one(text: str) -> str:
    (body,) = tool.kernels(text).values()
    return body


def test_renamed_registers_labels_and_depots_are_the_same_ptx() -> None:
    a, b = _one(_ptx()), _one(_ptx(depot=9, regs=40))
    assert a != b
    assert tool.canonical(a) == tool.canonical(b)


def test_a_moved_address_keeps_the_float_operations() -> None:
    a, b = _one(_ptx()), _one(_ptx(extra="\tadd.s64 \t%rd9, %rd4, 16;\n"))
    assert tool.canonical(a) != tool.canonical(b)
    assert tool.float_ops(a) == tool.float_ops(b)
    assert [op.split("(")[0] for op in tool.float_ops(a)] == [
        "fma.rn.f32",
        "shfl.sync.down.b32",
        "add.f32",
    ]


def test_a_shuffle_tree_in_another_order_changes_the_float_operations() -> None:
    a, b = _one(_ptx(off=16)), _one(_ptx(off=1))
    assert tool.float_ops(a) != tool.float_ops(b)


def test_an_fma_constant_is_part_of_its_operation() -> None:
    a = _one(_ptx())
    b = a.replace("0f00000000", "0f3F800000")
    assert tool.float_ops(a) != tool.float_ops(b)


def test_each_entry_is_its_own_kernel() -> None:
    got = tool.kernels(_ptx("first") + _ptx("second", depot=4))
    assert sorted(got) == ["first", "second"]
