"""Which cupy kernels a change touches, kernel by kernel, without a GPU: both trees' CUDA
sources compiled to PTX by NVRTC (as CupyOps compiles them, for compute_90), then each
kernel's PTX compared with labels renamed, and its sequence of floating-point operations.

    pip install nvidia-cuda-nvrtc-cu12          # the NVRTC library, no GPU needed
    python bench/ptx_float_ops.py --base main   # HEAD's working tree against main

"same PTX": every instruction equal once labels and registers are renamed, so the kernel
computes what it did. "same float ops": other instructions moved (addresses, loads) but the
float operations (fma, add, mul, ..., mma, shuffles) keep their sequence and constant operands;
likely the same arithmetic, not a proof (which values meet is not compared): the GPU tests
decide. "float ops changed": the arithmetic changed; its tests must run on a GPU.
NVRTC 12.9's PTX of a few kernels moves between two compiles of the same source (seen: 7 of
the one-block-per-pair attention kernels, comparing a tree with itself): they read "same
float ops" even then.
"""

from __future__ import annotations

import argparse
import ast
import ctypes
import re
import subprocess
import sys
import tempfile
from pathlib import Path

FLOAT_OP = re.compile(r"^\s*(?:@%p\d+\s+)?((?:fma|add|sub|mul|div|ex2|lg2|max|min|rcp|sqrt|neg)"
                      r"\.[\w.]*f32|mma\.[\w.]+|shfl\.[\w.]+)")  # fmt: skip


def nvrtc() -> ctypes.CDLL:
    try:
        import nvidia.cuda_nvrtc as pkg  # the pip wheel nvidia-cuda-nvrtc-cu12
    except ImportError:
        sys.exit("bench/ptx_float_ops.py: no NVRTC; pip install nvidia-cuda-nvrtc-cu12")
    lib = next(Path(list(pkg.__path__)[0], "lib").glob("libnvrtc.so.*"))
    return ctypes.CDLL(str(lib))


def sources(ops_dir: Path) -> str:
    """The module's source as CupyOps builds it: its _SOURCES in order, concatenated (in
    cupy_modules.py, or cupy_ops.py in trees before it)."""
    for holder in ("cupy_modules.py", "cupy_ops.py"):
        if not (ops_dir / holder).exists():
            continue
        for node in ast.parse((ops_dir / holder).read_text()).body:
            if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "_SOURCES":
                names = ast.literal_eval(node.value)
                return "\n".join((ops_dir / n).read_text() for n in names)
    sys.exit(f"bench/ptx_float_ops.py: no _SOURCES in {ops_dir}/cupy_modules.py or cupy_ops.py")


# kernels CupyOps compiles as modules of their own, only where an option asks: the macro each
# module defines (the module's kernels are the ones it adds)
OPTIONAL_MODULES = ("ENGINE_ATTEND_FS", "ENGINE_ATTEND_TAIL")


def ptx(lib: ctypes.CDLL, code: str, *defines: str) -> str:
    prog = ctypes.c_void_p()
    lib.nvrtcCreateProgram(ctypes.byref(prog), code.encode(), b"module.cu", 0, None, None)
    opts = [b"-std=c++17", b"--gpu-architecture=compute_90"]
    opts += [f"-D{define}".encode() for define in defines]
    rc = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
    if rc:
        size = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetProgramLog(prog, log)
        sys.exit(log.value.decode())
    size = ctypes.c_size_t()
    lib.nvrtcGetPTXSize(prog, ctypes.byref(size))
    out = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetPTX(prog, out)
    return out.value.decode()


def kernels(text: str) -> dict[str, str]:
    """Each entry's PTX, its labels and local depots renamed (they number across the module)."""
    out = {}
    for m in re.finditer(r"\.entry (\w+)\(", text):
        body = text[m.start() : text.find("\n}\n", m.start())]
        body = re.sub(r"__local_depot\d+", "DEPOT", body)
        out[m.group(1)] = re.sub(r"\$L__BB\d+_", "L_", body)
    return out


REG = re.compile(r"%[a-z]+\d+")
CONST = re.compile(r"^\s*mov\.[busf]\d+\s+(%[a-z]+\d+),\s*(-?\w+);")


def canonical(body: str) -> str:
    """Registers renamed by their first appearance: equal only where every instruction is."""
    names: dict[str, str] = {}
    return REG.sub(lambda m: names.setdefault(m.group(0), f"%v{len(names)}"), body)


def float_ops(body: str) -> list[str]:
    """The float operations in order, each with the constants among its operands (a register
    last set from an immediate reads as that immediate: a shuffle's offset, an fma's zero);
    other operands are left out, so two kernels can share this and still differ."""
    consts: dict[str, str] = {}
    ops = []
    for line in body.splitlines():
        if c := CONST.match(line):
            consts[c.group(1)] = c.group(2)
        elif m := FLOAT_OP.match(line):
            imms = [consts.get(r, "") for r in REG.findall(line)]
            imms += re.findall(r"0f[0-9A-F]{8}", line)
            ops.append(m.group(1) + "(" + ",".join(imms) + ")")
    return ops


def all_kernels(lib: ctypes.CDLL, ops_dir: Path, defines: tuple[str, ...] = ()) -> dict[str, str]:
    """Every kernel of the tree's modules: the main one, then those an option compiles (the
    same sources with its macro defined; only the kernels the main module lacks); each
    compiled with `defines` too."""
    code = sources(ops_dir)
    out = kernels(ptx(lib, code, *defines))
    for define in OPTIONAL_MODULES:
        if define in code:
            extra = kernels(ptx(lib, code, define, *defines))
            out |= {name: body for name, body in extra.items() if name not in out}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", default="main", help="a commit (its engine/ops)")
    ap.add_argument("--head", default=None, help="a commit; default: the working tree")
    ap.add_argument(
        "--base-define",
        action="append",
        default=[],
        help="a macro to compile the base with (repeatable): a form a define compiled in "
        "there, against the head that made it the default",
    )
    args = ap.parse_args()
    root = Path(__file__).resolve().parents[1]
    lib = nvrtc()
    with tempfile.TemporaryDirectory() as tmp:
        trees = {}
        for side, ref in (("base", args.base), ("head", args.head)):
            if ref is None:
                trees[side] = root / "engine/ops"
                continue
            dest = Path(tmp, side)
            subprocess.run(["git", "-C", str(root), "worktree", "add", "-q", "--detach",
                            str(dest), ref], check=True)  # fmt: skip
            trees[side] = dest / "engine/ops"
        try:
            base = all_kernels(lib, trees["base"], tuple(args.base_define))
            head = all_kernels(lib, trees["head"])
        finally:
            for side in ("base", "head"):
                if Path(tmp, side).exists():
                    subprocess.run(["git", "-C", str(root), "worktree", "remove", "--force",
                                    str(Path(tmp, side))], check=True)  # fmt: skip
    rows = {"same PTX": [], "same float ops": [], "float ops changed": []}
    for name in sorted(set(base) & set(head)):
        if canonical(base[name]) == canonical(head[name]):
            rows["same PTX"].append(name)
        elif float_ops(base[name]) == float_ops(head[name]):
            rows["same float ops"].append(name)
        else:
            rows["float ops changed"].append(name)
    rows["new"] = sorted(set(head) - set(base))
    rows["gone"] = sorted(set(base) - set(head))
    for label, names in rows.items():
        print(f"{label}: {len(names)}" + (f"  {' '.join(names)}" if names else ""))


if __name__ == "__main__":
    main()
