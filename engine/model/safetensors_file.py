"""Read safetensors files into numpy, bf16 included (numpy alone has no bfloat16)."""

from __future__ import annotations

import json
import mmap
import struct
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

from engine.errors import InputError

DTYPES: dict[str, np.dtype] = {
    "F64": np.dtype(np.float64),
    "F32": np.dtype(np.float32),
    "F16": np.dtype(np.float16),
    "BF16": np.dtype(ml_dtypes.bfloat16),
    "F8_E4M3": np.dtype(ml_dtypes.float8_e4m3fn),
    "I64": np.dtype(np.int64),
    "I32": np.dtype(np.int32),
    "I16": np.dtype(np.int16),
    "I8": np.dtype(np.int8),
    "U64": np.dtype(np.uint64),
    "U32": np.dtype(np.uint32),
    "U16": np.dtype(np.uint16),
    "U8": np.dtype(np.uint8),
    "BOOL": np.dtype(np.bool_),
}


def read_header(path: Path) -> tuple[dict, int]:
    """Return the JSON header and the offset where tensor data starts."""
    try:
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise InputError(
                    f"{path}: truncated safetensors file: {len(head)} bytes, shorter than the "
                    "8 bytes that give its header's size; download or convert the model again"
                )
            (size,) = struct.unpack("<Q", head)
            file_size = path.stat().st_size
            if size > 100_000_000:
                raise InputError(f"{path}: corrupt safetensors file (header size {size})")
            if size > file_size - 8:
                raise InputError(
                    f"{path}: truncated safetensors file: {file_size} bytes, but its header "
                    f"alone needs {8 + size}; download or convert the model again"
                )
            header = json.loads(f.read(size))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: corrupt safetensors header ({exc})") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})") from None
    if not isinstance(header, dict):
        raise InputError(f"{path}: corrupt safetensors header (not an object)")
    return header, 8 + size


def _entry(path: Path, name: str, info: Any) -> Any:
    """(dtype, shape, begin, end) of one header entry, checked against itself."""
    if name == "__metadata__":
        return None
    try:
        dtype = DTYPES[info["dtype"]]
        shape = tuple(int(d) for d in info["shape"])
        begin, end = (int(x) for x in info["data_offsets"])
    except (KeyError, TypeError, ValueError):
        raise InputError(f"{path}: corrupt entry for tensor '{name}'") from None
    size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if begin < 0 or end - begin != size or min(shape, default=0) < 0:
        raise InputError(
            f"{path}: corrupt header: tensor '{name}' ({info['dtype']} {list(shape)}) is "
            f"{size} bytes, but its data_offsets {begin}..{end} span {end - begin}"
        )
    return dtype, shape, begin, end


def load(path: str | Path) -> dict[str, np.ndarray]:
    """All tensors of one file, in their stored dtype, as read-only arrays."""
    path = Path(path)
    header, start = read_header(path)
    data_size = path.stat().st_size - start
    with open(path, "rb") as f:
        buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if data_size else b""
    entries = {name: _entry(path, name, info) for name, info in header.items()}
    entries.pop("__metadata__", None)
    needed = max((end for _, _, _, end in entries.values()), default=0)
    if needed > data_size:
        raise InputError(
            f"{path}: truncated safetensors file: {start + data_size} bytes, but its header "
            f"places tensor data up to byte {start + needed}; download or convert the model again"
        )
    out: dict[str, np.ndarray] = {}
    for name, (dtype, shape, begin, _) in entries.items():
        count = int(np.prod(shape, dtype=np.int64))
        out[name] = np.frombuffer(buf, dtype=dtype, count=count, offset=start + begin).reshape(
            shape
        )
    return out


def save(path: str | Path, tensors: dict[str, np.ndarray], metadata: dict | None = None) -> None:
    """Write tensors (bf16 via ml_dtypes) in the safetensors layout, names sorted."""
    names = {v: k for k, v in DTYPES.items()}
    header: dict = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    offset = 0
    blobs = []
    for name in sorted(tensors):
        arr = np.ascontiguousarray(tensors[name])
        blob = arr.tobytes()
        header[name] = {
            "dtype": names[arr.dtype],
            "shape": list(arr.shape),
            "data_offsets": [offset, offset + len(blob)],
        }
        offset += len(blob)
        blobs.append(blob)
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for blob in blobs:
            f.write(blob)
