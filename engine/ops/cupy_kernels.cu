// Kernels of the cupy backend (compiled by NVRTC through cupy.RawModule).
//
// Every reduction has one fixed order that depends only on the row being computed (its
// length, its absolute position), never on how many rows a launch holds or where the row
// sits among them: one block per row (or per row and head), per-thread partial sums in
// index order, then a shared-memory tree of fixed shape. No value passes through an atomic
// (the split attention's counter only elects the block that merges: cupy_attend.cu).

// Programmatic dependent launch (cupy_launch.py): every kernel starts by waiting for the grid
// before it to complete and its memory to be visible (griddepcontrol.wait: at once where the
// launch had no programmatic edge), then lets the next one start launching. So each kernel
// still reads and writes after the one before has finished, exactly as in stream order; only
// the next launch overlaps its tail. Hopper and later; a no-op before.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define PDL_ENTRY() asm volatile("griddepcontrol.wait;\n\tgriddepcontrol.launch_dependents;" ::: "memory")
#else
#define PDL_ENTRY()
#endif

#define KIND_F32 0
#define KIND_BF16 1
#define KIND_FP8 2
#define NEG_INF __int_as_float(0xff800000)
#define ATT_G 8    // keys in flight per warp when scoring
#define ATT_NG 4   // groups of D threads per block, each taking every ATT_NG-th chunk of keys
#define ATT_GV 32  // partial sums per thread over the values (their loads in flight together)

__device__ __forceinline__ unsigned short f32_to_bf16(float f) {
    unsigned int u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);  // NaN
    u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
    return (unsigned short)(u >> 16);
}

__device__ __forceinline__ float bf16_to_f32(unsigned short b) {
    return __uint_as_float(((unsigned int)b) << 16);
}

// float32 -> float8 e4m3fn, round to nearest even; |x| <= 448 and finite (the caller clips).
__device__ __forceinline__ unsigned char f32_to_e4m3(float x) {
    unsigned char sign = (unsigned char)((__float_as_uint(x) >> 24) & 0x80u);
    float a = fabsf(x);
    if (a == 0.0f) return sign;
    int e;
    frexpf(a, &e);               // a = m * 2^e, m in [0.5, 1)
    int E = max(e - 1, -6);      // -6: the smallest normal exponent; below it, subnormals
    float r = rintf(ldexpf(a, 3 - E));  // mantissa with 3 fraction bits, in [0, 16]
    return sign | (unsigned char)(((E + 6) << 3) + (int)r);  // r == 16 carries into E + 1
}

__device__ __forceinline__ float e4m3_to_f32(unsigned char c) {
    int ef = (c >> 3) & 15, m = c & 7;
    float v = ef == 0 ? ldexpf((float)m, -9) : ldexpf((float)(8 + m), ef - 10);
    return (c & 0x80u) ? -v : v;
}

template <int KIND>
__device__ __forceinline__ float load_code(const void* codes, long long i, float scale_exp) {
    if (KIND == KIND_F32) return ((const float*)codes)[i];
    if (KIND == KIND_BF16) return bf16_to_f32(((const unsigned short*)codes)[i]);
    return ldexpf(e4m3_to_f32(((const unsigned char*)codes)[i]), (int)scale_exp);
}

// Levels s = 16 .. 1 of the trees below in a group's first warp: lane t < s takes op(its
// value, lane t + s's), by a shuffle where the shared-memory form needs a store, a load and a
// block-wide barrier a level. The same pairs in the same order: the same bits. Groups of D
// >= 32 threads start at a warp's first lane; a group under 32 threads is the whole block.
template <typename Op>
__device__ __forceinline__ float warp_levels(float x, int t, int D, Op op) {
    const unsigned mask = D >= 32 ? 0xffffffffu : (1u << D) - 1u;
    for (int s = min(D, 32) >> 1; s > 0; s >>= 1) {
        const float o = __shfl_down_sync(mask, x, s);
        if (t < s) x = op(x, o);
    }
    return x;
}

// Trees over one group's D values in red[] (D a power of two; t the thread's index in its
// group): red[t] = op(red[t], red[t + s]) for t < s, s = D / 2 .. 1, the levels under 32 in
// registers (warp_levels); every thread gets the root. Every thread of the block calls them
// the same number of times: their barriers are block-wide.
template <typename Op>
__device__ __forceinline__ float group_tree(float* red, int t, int D, float v, Op op) {
    if (D > 32) {
        red[t] = v;
        __syncthreads();
        for (int s = D >> 1; s >= 32; s >>= 1) {
            if (t < s) red[t] = op(red[t], red[t + s]);
            __syncthreads();
        }
    }
    if (t < 32) {
        const float x = warp_levels(D > 32 ? red[t] : v, t, D, op);
        if (t == 0) red[0] = x;
    }
    __syncthreads();
    const float out = red[0];
    __syncthreads();
    return out;
}

__device__ __forceinline__ float group_max(float* red, int t, int D, float v) {
    return group_tree(red, t, D, v, [](float a, float b) { return fmaxf(a, b); });
}

__device__ __forceinline__ float group_sum(float* red, int t, int D, float v) {
    return group_tree(red, t, D, v, [](float a, float b) { return __fadd_rn(a, b); });
}

// the same trees over the whole block (blockDim.x values)
__device__ __forceinline__ float tree_sum(float* red, float v) {
    return group_sum(red, threadIdx.x, blockDim.x, v);
}

__device__ __forceinline__ float tree_max(float* red, float v) {
    return group_max(red, threadIdx.x, blockDim.x, v);
}

extern "C" {

// x [rows_in, cols] float32 -> y [rows_out, cols] bf16 bits; rows past rows_in are zero
__global__ void to_bf16(const float* x, unsigned short* y, long long n_in, long long n_out) {
    PDL_ENTRY();
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n_out) y[i] = i < n_in ? f32_to_bf16(x[i]) : (unsigned short)0;
}

// One row of `cols` floats at xr normed into yr (and its bf16 bits into ybr where not null):
// y = x * (1 / sqrt(mean(x^2) + eps)) * w, per-thread sums in index order, then the tree.
__device__ __forceinline__ void norm_row(const float* xr, const float* w, float* yr,
                                         unsigned short* ybr, int cols, float eps, float* red) {
    float part = 0.0f;
    for (int i = threadIdx.x; i < cols; i += blockDim.x) part = part + xr[i] * xr[i];
    float var = tree_sum(red, part) / (float)cols;
    float inv = 1.0f / sqrtf(var + eps);
    for (int i = threadIdx.x; i < cols; i += blockDim.x) {
        const float v = (xr[i] * inv) * w[i];
        yr[i] = v;
        if (ybr) ybr[i] = f32_to_bf16(v);
    }
}

// y = x * (1 / sqrt(mean(x^2) + eps)) * w over the last axis of `cols`; one block per row.
// Where yb is not null, the same values as bf16 bits too (what to_bf16 would make of y: the
// input of the GEMM that follows, so it needs no conversion launch of its own).
__global__ void rms_norm(const float* x, const float* w, float* y, unsigned short* yb, int cols,
                         float eps) {
    PDL_ENTRY();
    extern __shared__ float red[];
    const long long off = (long long)blockIdx.x * cols;
    norm_row(x + off, w, y + off, yb ? yb + off : nullptr, cols, eps, red);
}

// The MTP layer's input in one launch: row r of y [n, 2 cols] is rms_norm(table[ids[r]], we)
// then rms_norm(hidden[r], wh) (embed, two rms_norm launches and a concatenation otherwise,
// with their bits), and its bf16 bits into yb where not null. One block per row, of the
// thread count rms_norm takes at `cols`.
__global__ void embed_norm_concat(const float* table, const long long* ids, const float* hidden,
                                  const float* we, const float* wh, float* y, unsigned short* yb,
                                  int cols, float eps) {
    PDL_ENTRY();
    extern __shared__ float red[];
    const long long r = blockIdx.x, off = r * 2 * cols;
    norm_row(table + ids[r] * cols, we, y + off, yb ? yb + off : nullptr, cols, eps, red);
    norm_row(hidden + r * cols, wh, y + off + cols, yb ? yb + off + cols : nullptr, cols, eps,
             red);
}

// s = a + b, then y = rms_norm(s) (and its bf16 bits where yb is not null): the same float
// operations in the same order as an elementwise add followed by rms_norm, in one launch.
// One block per row. A thread's first NORM_HELD values stay in registers, with their norm
// weights, fetched before the wait for the kernel before (weights are no kernel's output);
// values past NORM_HELD * blockDim (cols over 2048 at 256 threads) are read back from s.
#define NORM_HELD 8
__global__ void add_rms_norm(const float* a, const float* b, float* s, const float* w, float* y,
                             unsigned short* yb, int cols, float eps) {
    float held[NORM_HELD], wk[NORM_HELD];
#pragma unroll
    for (int k = 0; k < NORM_HELD; ++k) {
        const int i = threadIdx.x + k * blockDim.x;
        wk[k] = i < cols ? __ldg(w + i) : 0.0f;
    }
    PDL_ENTRY();
    extern __shared__ float red[];
    const long long off = (long long)blockIdx.x * cols;
    float part = 0.0f;
#pragma unroll
    for (int k = 0; k < NORM_HELD; ++k) {
        const int i = threadIdx.x + k * blockDim.x;
        held[k] = i < cols ? a[off + i] + b[off + i] : 0.0f;
    }
#pragma unroll
    for (int k = 0; k < NORM_HELD; ++k) {
        const int i = threadIdx.x + k * blockDim.x;
        if (i < cols) {
            s[off + i] = held[k];
            part = part + held[k] * held[k];
        }
    }
    for (int i = threadIdx.x + NORM_HELD * blockDim.x; i < cols; i += blockDim.x) {
        const float v = a[off + i] + b[off + i];
        s[off + i] = v;
        part = part + v * v;
    }
    float var = tree_sum(red, part) / (float)cols;
    float inv = 1.0f / sqrtf(var + eps);
#pragma unroll
    for (int k = 0; k < NORM_HELD; ++k) {
        const int i = threadIdx.x + k * blockDim.x;
        if (i < cols) {
            const float v = (held[k] * inv) * wk[k];
            y[off + i] = v;
            if (yb) yb[off + i] = f32_to_bf16(v);
        }
    }
    for (int i = threadIdx.x + NORM_HELD * blockDim.x; i < cols; i += blockDim.x) {
        const float v = (s[off + i] * inv) * w[i];
        y[off + i] = v;
        if (yb) yb[off + i] = f32_to_bf16(v);
    }
}

// x [n, heads, D], cos/sin [n, D/2]: rotate_half as Hugging Face does
__global__ void rope(const float* x, const float* cos_t, const float* sin_t, float* y,
                     int heads, int half, long long total) {
    PDL_ENTRY();
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;  // over n * heads * half
    if (i >= total) return;
    long long row = i / ((long long)heads * half);
    int j = (int)(i % half);
    long long base = (i / half) * 2 * half;
    float c = cos_t[row * half + j], s = sin_t[row * half + j];
    float x1 = x[base + j], x2 = x[base + half + j];
    y[base + j] = x1 * c - x2 * s;
    y[base + half + j] = x2 * c + x1 * s;
}

// One head's value x of thread t (of D) RMS-normed with w, then roped at `row` of cos/sin
// (rms_norm's arithmetic at cols = D, a power of two <= 256, and rope's rotation);
// `sum` is the D threads' fixed tree (tree_sum over a block of D, or a slot's of a wider
// block), nrm D floats of scratch. Every caller's float operations are these.
extern "C++" {  // templates: C++ linkage inside this extern "C" block
template <class Sum>
__device__ __forceinline__ float norm_rope_at(float x, const float* w, const float* cos_t,
                                              const float* sin_t, long long row, float eps,
                                              float* nrm, int t, int D, Sum sum) {
    const int half = D / 2;
    const float var = sum(0.0f + x * x) / (float)D;
    const float inv = 1.0f / sqrtf(var + eps);
    nrm[t] = (x * inv) * w[t];
    __syncthreads();
    const int j = t < half ? t : t - half;
    const float c = cos_t[row * half + j], s = sin_t[row * half + j];
    float y;
    if (t < half) {
        const float x1 = nrm[t], x2 = nrm[t + half];
        y = x1 * c - x2 * s;
    } else {
        const float x1 = nrm[j], x2 = nrm[t];
        y = x2 * c + x1 * s;
    }
    return y;
}
}  // extern "C++"

__device__ __forceinline__ float norm_rope_head(float x, const float* w, const float* cos_t,
                                                const float* sin_t, long long row, float eps,
                                                float* red) {
    return norm_rope_at(x, w, cos_t, sin_t, row, eps, red + blockDim.x, threadIdx.x, blockDim.x,
                        [red](float v) { return tree_sum(red, v); });
}

// q and k of one qkv output row [n, stride] (q heads, then k heads, adjacent, D floats each):
// each head RMS-normed with its weight (qw for q heads, kw for k heads), then roped; written to
// q [n, hq, D] and k [n, hkv, D]. One block of D threads per (row, head). One launch in place
// of copy, norm and RoPE of q and of k.
__global__ void qk_norm_rope(const float* qkv, long long stride, const float* qw, const float* kw,
                             const float* cos_t, const float* sin_t, float* qo, float* ko,
                             int hq, int hkv, float eps) {
    PDL_ENTRY();
    extern __shared__ float red[];  // D floats for the tree, then D for the normed head
    const int D = blockDim.x, t = threadIdx.x;
    const long long row = blockIdx.x;
    const int hh = blockIdx.y;
    const bool is_q = hh < hq;
    const float x = qkv[row * stride + (long long)hh * D + t];
    const float y = norm_rope_head(x, is_q ? qw : kw, cos_t, sin_t, row, eps, red);
    if (is_q)
        qo[(row * hq + hh) * D + t] = y;
    else
        ko[(row * hkv + (hh - hq)) * D + t] = y;
}

// y [n, inter] = silu(gate) * up; gate and up rows are `gs` and `us` floats apart (they may be
// the two halves of one fused gate_up output); where yb is not null, y's bf16 bits too
__global__ void silu_mul(const float* gate, const float* up, float* y, unsigned short* yb,
                         int inter, long long gs, long long us, long long total) {
    PDL_ENTRY();
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total) return;
    long long row = i / inter;
    int j = (int)(i % inter);
    float g = gate[row * gs + j], u = up[row * us + j];
    const float v = (g / (1.0f + expf(-g))) * u;
    y[i] = v;
    if (yb) yb[i] = f32_to_bf16(v);
}

// Thread t's code of one head's values (D threads, `amax_of` their fixed max tree: fp8 only)
// into codes[i], and (fp8) the head's exponent into *ex; the bytes of engine/kv/codec.py.
extern "C++" {
template <class Max>
__device__ __forceinline__ void encode_value(float v, int kind, void* codes, long long i,
                                             int* ex, Max amax_of) {
    if (kind == KIND_F32) {
        ((float*)codes)[i] = v;
    } else if (kind == KIND_BF16) {
        ((unsigned short*)codes)[i] = f32_to_bf16(v);
    } else {
        float amax = amax_of(fabsf(v));
        int e;
        frexpf(amax, &e);  // frexp(0) gives 0, as numpy's
        const int x = min(max(e - 8, -128), 127);
        float scaled = fminf(fmaxf(ldexpf(v, -x), -448.0f), 448.0f);
        ((unsigned char*)codes)[i] = f32_to_e4m3(scaled);
        *ex = x;
    }
}
}  // extern "C++"

// Encode one head of one row (this thread's value v, blockDim.x == D) into codes row dst_row.
__device__ __forceinline__ void store_value(float v, long long dst_row, void* codes,
                                            signed char* exps, int kind, float* red) {
    const int D = blockDim.x, t = threadIdx.x;
    int ex = 0;
    encode_value(v, kind, codes, dst_row * D + t, &ex, [red](float a) { return tree_max(red, a); });
    if (kind == KIND_FP8 && t == 0) exps[dst_row] = (signed char)ex;
}

__device__ __forceinline__ void store_head(const float* x, long long dst_row, void* codes,
                                           signed char* exps, int kind, float* red) {
    store_value(x[threadIdx.x], dst_row, codes, exps, kind, red);
}

// Encode rows k/v [n, Hkv, D] into their slots (page * page_rows + row) of the pages
// [slots, Hkv, D]. One block per (row, head), blockDim.x == D. Rows of x are `xstride`
// floats apart (a column slice of a wider output).
__global__ void kv_store(const float* x, const long long* slots, void* codes,
                         signed char* exps, int kind, int hkv, long long xstride) {
    PDL_ENTRY();
    extern __shared__ float red[];
    const float* src = x + (long long)blockIdx.x * xstride + (long long)blockIdx.y * blockDim.x;
    store_head(src, slots[blockIdx.x] * hkv + blockIdx.y, codes, exps, kind, red);
}

// kv_store of k and of v in one launch: blocks (row, head) with head < hkv store k's head,
// the others v's head - hkv; each block does what kv_store's would.
__global__ void kv_store2(const float* k, long long kstride, void* kc, signed char* ke,
                          const float* v, long long vstride, void* vc, signed char* ve,
                          const long long* slots, int kind, int hkv) {
    PDL_ENTRY();
    extern __shared__ float red[];
    const bool is_k = (int)blockIdx.y < hkv;
    const int h = is_k ? blockIdx.y : blockIdx.y - hkv;
    const float* src = (is_k ? k + (long long)blockIdx.x * kstride
                             : v + (long long)blockIdx.x * vstride) + (long long)h * blockDim.x;
    store_head(src, slots[blockIdx.x] * hkv + h, is_k ? kc : vc, is_k ? ke : ve, kind, red);
}

// qk_norm_rope and kv_store2 of one qkv output in one launch: blocks (row, head) over
// hq + 2 hkv heads; a q head is normed, roped and written to qo as qk_norm_rope writes it; a k
// head is normed and roped the same way and its value encoded into its slot of kc/ke, and a v
// head (the qkv row's as it is) into vc/ve, with kv_store2's bytes. No k or v array between.
__global__ void qkv_norm_rope_store(const float* qkv, long long stride, const float* qw,
                                    const float* kw, const float* cos_t, const float* sin_t,
                                    float* qo, void* kc, signed char* ke, void* vc,
                                    signed char* ve, const long long* slots, int kind, int hq,
                                    int hkv, float eps) {
    PDL_ENTRY();
    extern __shared__ float red[];  // 2 D floats (norm_rope_head; store_value uses D)
    const int D = blockDim.x, t = threadIdx.x;
    const long long row = blockIdx.x;
    const int hh = blockIdx.y;
    const float x = qkv[row * stride + (long long)hh * D + t];
    if (hh >= hq + hkv) {
        store_value(x, slots[row] * hkv + (hh - hq - hkv), vc, ve, kind, red);
        return;
    }
    const float y = norm_rope_head(x, hh < hq ? qw : kw, cos_t, sin_t, row, eps, red);
    if (hh < hq)
        qo[(row * hq + hh) * D + t] = y;
    else
        store_value(y, slots[row] * hkv + (hh - hq), kc, ke, kind, red);
}

}  // extern "C"
