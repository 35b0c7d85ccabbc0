"""Each cupy kernel's registers, stack frame and spills, without a GPU: the module's sources
(as CupyOps builds them) compiled by NVRTC for sm_90 with ptxas's -v report, read kernel by
kernel, beside a base tree's where one is given.

    pip install nvidia-cuda-nvrtc-cu12
    python bench/kernel_frames.py --base main --only attend_ --frames

A stack frame with no spills is a local array the compiler could not keep in registers (an
index it cannot resolve: every attention kernel's partial sums sat in memory that way until
2026-12-07, docs/cupy.md); spills are registers that did not fit the launch bounds. Both cost
loads and stores to local memory in the loops they sit in. The kernels an option compiles as a
module of their own (ptx_float_ops.OPTIONAL_MODULES) are read too.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import NamedTuple

_SPEC = importlib.util.spec_from_file_location(
    "ptx_float_ops", Path(__file__).with_name("ptx_float_ops.py")
)
assert _SPEC and _SPEC.loader
ptx_tool = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(ptx_tool)

ENTRY = re.compile(r"Compiling entry function '(\w+)'")
FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
USED = re.compile(r"Used (\d+) registers")


class Frame(NamedTuple):
    registers: int
    stack: int
    spill_stores: int
    spill_loads: int


def compile_log(lib: ctypes.CDLL, code: str, define: str = "") -> str:
    """ptxas's -v report of the module compiled for sm_90 (the tool stops on a compile error)."""
    prog = ctypes.c_void_p()
    lib.nvrtcCreateProgram(ctypes.byref(prog), code.encode(), b"module.cu", 0, None, None)
    opts = [b"-std=c++17", b"--gpu-architecture=sm_90", b"--ptxas-options=-v"]
    opts += [f"-D{define}".encode()] if define else []
    rc = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(prog, log)
    if rc:
        sys.exit(log.value.decode())
    return log.value.decode()


def frames(log: str) -> dict[str, Frame]:
    """Each entry's figures from a ptxas -v log: its stack and spill line and its registers
    line, both after "Compiling entry function" names it."""
    out: dict[str, Frame] = {}
    name, stack = "", (0, 0, 0)
    for line in log.splitlines():
        if m := ENTRY.search(line):
            name, stack = m.group(1), (0, 0, 0)
        elif (m := FRAME.search(line)) and name:
            stack = (int(m.group(1)), int(m.group(2)), int(m.group(3)))
        elif (m := USED.search(line)) and name:
            out[name] = Frame(int(m.group(1)), *stack)
    return out


def tree_frames(lib: ctypes.CDLL, ops_dir: Path) -> dict[str, Frame]:
    code = ptx_tool.sources(ops_dir)
    out = frames(compile_log(lib, code))
    for define in ptx_tool.OPTIONAL_MODULES:
        if define in code:
            extra = frames(compile_log(lib, code, define))
            out |= {k: v for k, v in extra.items() if k not in out}
    return out


def _then(was: Frame | None, now: Frame) -> str:
    if was is None:
        return "new"
    if was == now:
        return "same"
    spills = f"{was.spill_stores}/{was.spill_loads}"
    return f"{was.registers} registers, {was.stack} frame, {spills} spills"


def report(
    head: dict[str, Frame], base: dict[str, Frame] | None, only: str, frames_only: bool
) -> str:
    """A Markdown table of the kernels whose name holds `only` (frames_only: those with a
    stack frame or spills), with the base's figures where a base is given."""
    rows = [
        "| kernel | registers | stack frame | spill stores | spill loads | base |",
        "| --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for name in sorted(head):
        f = head[name]
        if only not in name or (frames_only and not (f.stack or f.spill_stores or f.spill_loads)):
            continue
        then = "" if base is None else _then(base.get(name), f)
        cells = f"{f.registers} | {f.stack} | {f.spill_stores} | {f.spill_loads}"
        rows.append(f"| {name} | {cells} | {then} |")
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", default=None, help="a commit whose figures stand beside")
    ap.add_argument("--only", default="", help="kernels whose name holds this")
    ap.add_argument("--frames", action="store_true", help="only kernels with a frame or spills")
    args = ap.parse_args()
    root = Path(__file__).resolve().parents[1]
    lib = ptx_tool.nvrtc()
    head = tree_frames(lib, root / "engine/ops")
    base = None
    if args.base:
        with tempfile.TemporaryDirectory() as tmp:
            dest = Path(tmp, "base")
            git = ["git", "-C", str(root), "worktree"]
            subprocess.run([*git, "add", "-q", "--detach", str(dest), args.base], check=True)
            try:
                base = tree_frames(lib, dest / "engine/ops")
            finally:
                subprocess.run([*git, "remove", "--force", str(dest)], check=True)
    print(report(head, base, args.only, args.frames))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
