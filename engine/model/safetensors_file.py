"""Read safetensors files into numpy, bf16 included (numpy alone has no bfloat16)."""

from __future__ import annotations

import json
import mmap
import struct
from pathlib import Path

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
                raise InputError(f"{path}: corrupt safetensors file (shorter than 8 bytes)")
            (size,) = struct.unpack("<Q", head)
            file_size = path.stat().st_size
            if size > file_size - 8 or size > 100_000_000:
                raise InputError(f"{path}: corrupt safetensors file (header size {size})")
            header = json.loads(f.read(size))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: corrupt safetensors header ({exc})") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})") from None
    if not isinstance(header, dict):
        raise InputError(f"{path}: corrupt safetensors header (not an object)")
    return header, 8 + size


def load(path: str | Path) -> dict[str, np.ndarray]:
    """All tensors of one file, in their stored dtype, as read-only arrays."""
    path = Path(path)
    header, start = read_header(path)
    data_size = path.stat().st_size - start
    with open(path, "rb") as f:
        buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if data_size else b""
    out: dict[str, np.ndarray] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype = DTYPES[info["dtype"]]
            shape = tuple(int(d) for d in info["shape"])
            begin, end = (int(x) for x in info["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise InputError(f"{path}: corrupt entry for tensor '{name}'") from None
        count = int(np.prod(shape, dtype=np.int64))
        if end - begin != count * dtype.itemsize or begin < 0 or end > data_size:
            raise InputError(
                f"{path}: tensor '{name}' has {end - begin} bytes, expected "
                f"{count * dtype.itemsize} within {data_size} (truncated or corrupt file)"
            )
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
