# MLX affine quantization (mx.quantize / mx.dequantize, mode "affine") in numpy.
#
# Checkpoint layout written by `mlx_lm convert -q` (mlx-lm 0.32, mlx 0.32; checked against
# mlx_lm/utils.py quantize_model/save_config and mlx/nn/layers/quantized.py):
#   * every leaf module that has `to_quantized` (nn.Linear, nn.Embedding) and whose weight's
#     last dim is divisible by group_size is quantized; norms (RMSNorm) never are. For Qwen3
#     that is model.embed_tokens, self_attn.{q,k,v,o}_proj, mlp.{gate,up,down}_proj and
#     lm_head when untied. A quantized module `<prefix>` is stored as
#       <prefix>.weight  uint32 [out, in * bits / 32]   packed codes
#       <prefix>.scales  [out, in / group_size]          dtype of the source weight (bf16)
#       <prefix>.biases  [out, in / group_size]          same dtype
#     (a Linear with a real bias keeps it as `<prefix>.bias`, a different key). A quantized
#     embedding uses the same three names on model.embed_tokens; a tied head then runs
#     quantized_matmul against those same tensors.
#   * config.json gains "quantization" and an identical copy "quantization_config":
#     {"group_size": 64, "bits": 4, "mode": "affine"} plus optional per-module entries keyed
#     by module path, e.g. "model.layers.0.mlp.down_proj": {"group_size": 64, "bits": 8,
#     "mode": "affine"}, or false for a module left unquantized. Keys are sorted, indent 4.
#
# Algorithm (mlx/backend/cpu/quantized.cpp, all float32): per group of `group_size`
# consecutive elements of a row, with n = 2**bits - 1 and eps = 1e-7:
#   scale = max((max - min) / n, eps), negated unless |min| > |max|; edge = min if
#   |min| > |max| else max; q0 = rint(edge / scale); if q0 != 0: scale = edge / q0 and
#   bias = edge, else bias = 0 (so the edge value and zero are representable exactly);
#   code = clip(rint((w - bias) / scale), 0, n) using the *float32* scale, then scales and
#   biases are cast to the weight's dtype. bits == 1: scale = max(max - min, eps), bias = min.
# Packing: the codes of a row form one little-endian bit stream, code i at bits
# [i * bits, (i + 1) * bits), viewed as little-endian uint32 words. For 4 bits that is 8
# codes per word, code 0 in the lowest nibble; 3/5/6-bit codes straddle byte and word edges.
# Dequantized value: scale * code + bias.

from __future__ import annotations

import numpy as np

SUPPORTED_BITS = (1, 2, 3, 4, 5, 6, 8)
_EPS = np.float32(1e-7)


def _check(in_dim: int, group_size: int, bits: int) -> None:
    if bits not in SUPPORTED_BITS:
        raise ValueError(f"bits must be one of {SUPPORTED_BITS}, got {bits}")
    if group_size <= 0 or group_size % 32:
        raise ValueError(f"group_size must be a positive multiple of 32, got {group_size}")
    if in_dim % group_size:
        raise ValueError(f"last dim {in_dim} is not divisible by group_size {group_size}")


def pack(codes: np.ndarray, bits: int) -> np.ndarray:
    """Pack codes [..., n] (each < 2**bits) into uint32 words [..., n * bits / 32]."""
    n = codes.shape[-1]
    if (n * bits) % 32:
        raise ValueError(f"{n} codes of {bits} bits do not fill whole uint32 words")
    c = np.ascontiguousarray(codes, dtype=np.uint32)
    if 32 % bits == 0:
        per = 32 // bits
        shifts = np.arange(0, 32, bits, dtype=np.uint32)
        words = c.reshape(*c.shape[:-1], n // per, per) << shifts
        return np.bitwise_or.reduce(words, axis=-1).astype(np.uint32)
    stream = ((c[..., None] >> np.arange(bits, dtype=np.uint32)) & 1).astype(np.uint8)
    stream = stream.reshape(*c.shape[:-1], n * bits)
    packed = np.packbits(stream, axis=-1, bitorder="little")
    return np.ascontiguousarray(packed).view("<u4").astype(np.uint32)


def unpack(wq: np.ndarray, bits: int) -> np.ndarray:
    """Inverse of pack: uint32 words [..., m] -> uint8 codes [..., m * 32 / bits]."""
    w = np.ascontiguousarray(wq, dtype="<u4")
    mask = np.uint32((1 << bits) - 1)
    if 32 % bits == 0:
        shifts = np.arange(0, 32, bits, dtype=np.uint32)
        codes = (w[..., None] >> shifts) & mask
        return codes.reshape(*w.shape[:-1], -1).astype(np.uint8)
    stream = np.unpackbits(w.view(np.uint8), axis=-1, bitorder="little")
    stream = stream.reshape(*w.shape[:-1], -1, bits).astype(np.uint8)
    weights = (1 << np.arange(bits)).astype(np.uint8)
    return (stream * weights).sum(axis=-1, dtype=np.uint8)


def quantize(
    w: np.ndarray, group_size: int = 64, bits: int = 4, dtype: type | np.dtype | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return (wq uint32, scales, biases); scales/biases in `dtype`, default w's dtype."""
    in_dim = w.shape[-1]
    _check(in_dim, group_size, bits)
    out_dtype = np.dtype(dtype) if dtype is not None else w.dtype
    lead = w.shape[:-1]
    g = np.asarray(w).astype(np.float32).reshape(*lead, in_dim // group_size, group_size)
    w_max = g.max(axis=-1)
    w_min = g.min(axis=-1)
    n_bins = np.float32((1 << bits) - 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        if bits == 1:
            scale = np.maximum(w_max - w_min, _EPS)
            bias = w_min
        else:
            mask = np.abs(w_min) > np.abs(w_max)
            scale = np.maximum((w_max - w_min) / n_bins, _EPS)
            scale = np.where(mask, scale, -scale)
            edge = np.where(mask, w_min, w_max)
            q0 = np.rint(edge / scale)
            nonzero = q0 != 0
            scale = np.where(nonzero, edge / np.where(nonzero, q0, 1), scale)
            bias = np.where(nonzero, edge, np.float32(0))
        scale = scale.astype(np.float32)
        bias = bias.astype(np.float32)
        codes = np.rint((g - bias[..., None]) / scale[..., None])
    codes = np.clip(codes, 0, n_bins).astype(np.uint32).reshape(*lead, in_dim)
    return pack(codes, bits), scale.astype(out_dtype), bias.astype(out_dtype)


def dequantize(
    wq: np.ndarray,
    scales: np.ndarray,
    biases: np.ndarray,
    group_size: int = 64,
    bits: int = 4,
    dtype: type | np.dtype | None = np.float32,
) -> np.ndarray:
    """scale * code + bias.

    dtype float32 (default): product and sum in float32 (the product is exact for bf16/fp16
    scales); MLX's CPU quantized matmul forms its weight values this way, and
    mx.quantized_matmul on float32 inputs agrees with x @ this.T to float32 rounding.
    dtype None: bit-exact mx.dequantize, which works in the scales' dtype: the product and
    then the sum are rounded to it (so bf16 scales give a bf16 result).
    """
    codes = unpack(wq, bits).astype(np.float32)
    in_dim = codes.shape[-1]
    _check(in_dim, group_size, bits)
    lead = codes.shape[:-1]
    codes = codes.reshape(*lead, in_dim // group_size, group_size)
    s = np.asarray(scales)
    b = np.asarray(biases)
    work = s.dtype if dtype is None else np.dtype(dtype)
    prod = (codes * s.astype(np.float32)[..., None]).astype(work).astype(np.float32)
    out = (prod + b.astype(work).astype(np.float32)[..., None]).astype(work)
    return out.reshape(*lead, in_dim)
