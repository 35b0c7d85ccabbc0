// Kernels of the cupy backend (compiled by NVRTC through cupy.RawModule).
//
// Every reduction has one fixed order that depends only on the row being computed (its
// length, its absolute position), never on how many rows a launch holds or where the row
// sits among them: one block per row (or per row and head), per-thread partial sums in
// index order, then a shared-memory tree of fixed shape. No atomics, no split reductions.

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

// fixed-shape tree over blockDim.x (a power of two) values in red[]; every thread gets red[0]
__device__ __forceinline__ float tree_sum(float* red, float v) {
    int t = threadIdx.x;
    red[t] = v;
    __syncthreads();
    for (int s = blockDim.x >> 1; s > 0; s >>= 1) {
        if (t < s) red[t] = red[t] + red[t + s];
        __syncthreads();
    }
    float out = red[0];
    __syncthreads();
    return out;
}

__device__ __forceinline__ float tree_max(float* red, float v) {
    int t = threadIdx.x;
    red[t] = v;
    __syncthreads();
    for (int s = blockDim.x >> 1; s > 0; s >>= 1) {
        if (t < s) red[t] = fmaxf(red[t], red[t + s]);
        __syncthreads();
    }
    float out = red[0];
    __syncthreads();
    return out;
}

// Trees over one group's D values (D a power of two; t the thread's index in its group). Every
// thread of the block calls them the same number of times: their barriers are block-wide.
__device__ __forceinline__ float group_max(float* red, int t, int D, float v) {
    red[t] = v;
    __syncthreads();
    for (int s = D >> 1; s > 0; s >>= 1) {
        if (t < s) red[t] = fmaxf(red[t], red[t + s]);
        __syncthreads();
    }
    float out = red[0];
    __syncthreads();
    return out;
}

__device__ __forceinline__ float group_sum(float* red, int t, int D, float v) {
    red[t] = v;
    __syncthreads();
    for (int s = D >> 1; s > 0; s >>= 1) {
        if (t < s) red[t] = red[t] + red[t + s];
        __syncthreads();
    }
    float out = red[0];
    __syncthreads();
    return out;
}

// Causal attention of q [n, Hq, D] over keys stored in pages, one block per (row, q head) of
// ATT_NG groups of D threads (D = head_dim, a template parameter: 32, 64, 128 or 256, so the
// loops over a lane's dims unroll and a warp issues the loads of G keys before it sums any:
// the scoring waits on memory about once per G keys, not once per dim). Row r sees keys 0..last[r]
// of its stream, through its page list ptab[poff[r]..]. Keys are cut into chunks of D at
// absolute positions; chunk c belongs to group c % ATT_NG, which takes its chunks in order
// with an online softmax. Per chunk: each warp scores every nwarps-th key (each lane sums its
// D/32 adjacent dimensions in order, then a fixed shuffle tree), a tree max and a tree sum,
// then each thread accumulates its output dimension over the chunk's keys (ATT_GV
// interleaved partial sums, merged by a fixed tree). At the end the groups' (max, sum,
// output) merge in group order. Every order depends on last[r] and D alone, never on other
// rows; no atomics, nothing split across blocks.
template <int KIND, int D>
__device__ void attend_paged(const float* q, const void* kc, const void* vc,
                             const signed char* ke, const signed char* ve, const int* ptab,
                             const int* poff, const int* last_pos, float* out, int hq, int hkv,
                             int page_rows, float scale) {
    extern __shared__ float sh[];
    constexpr int per = D / 32, nwarps = D / 32, GD = ATT_NG * D;
    // keys scored at once by one warp: all their loads are issued before the first sum
    constexpr int G = per <= 4 ? 2 * ATT_G : ATT_G;
    const int g = threadIdx.x / D, t = threadIdx.x % D;
    const int lane = t & 31, warp = t >> 5;
    float* qs = sh;
    float* ps = sh + D + g * D;
    float* red = sh + D + GD + g * D;
    float* kex = sh + D + 2 * GD + g * D;
    float* vex = sh + D + 3 * GD + g * D;
    int* rows = (int*)(sh + D + 4 * GD) + g * D;  // (slot * hkv + kv head) of the chunk's keys
    float* ms = sh + D + 5 * GD;
    float* ls = ms + ATT_NG;
    const int r = blockIdx.x, h = blockIdx.y, kvh = h / (hq / hkv);
    const int* pages = ptab + poff[r];
    const int last = last_pos[r];
    if (g == 0) qs[t] = q[((long long)r * hq + h) * D + t] * scale;
    float m = NEG_INF, l = 0.0f, acc = 0.0f;
    const int nchunks = last / D + 1;
    for (int it = 0; it * ATT_NG < nchunks; ++it) {
        const int c0 = (it * ATT_NG + g) * D;
        const bool live = c0 <= last;  // the same for the whole group
        const int j = c0 + t;
        if (live && j <= last) {
            int row = (pages[j / page_rows] * page_rows + j % page_rows) * hkv + kvh;
            rows[t] = row;
            if (KIND == KIND_FP8) {
                kex[t] = (float)ke[row];
                vex[t] = (float)ve[row];
            }
        }
        __syncthreads();
        if (live) {
            float qr[per];
#pragma unroll
            for (int i = 0; i < per; ++i) qr[i] = qs[lane * per + i];
            for (int jb = warp; jb < D && c0 + jb <= last; jb += nwarps * G) {
                float kv[G][per];
#pragma unroll
                for (int gg = 0; gg < G; ++gg) {
                    const int jj = jb + gg * nwarps;
                    if (jj < D && c0 + jj <= last) {
                        const long long base = (long long)rows[jj] * D + lane * per;
                        const float ex = KIND == KIND_FP8 ? kex[jj] : 0.0f;
#pragma unroll
                        for (int i = 0; i < per; ++i) kv[gg][i] = load_code<KIND>(kc, base + i, ex);
                    } else {
#pragma unroll
                        for (int i = 0; i < per; ++i) kv[gg][i] = 0.0f;
                    }
                }
#pragma unroll
                for (int gg = 0; gg < G; ++gg) {
                    float part = 0.0f;  // this lane's dims in order, then a fixed shuffle tree
#pragma unroll
                    for (int i = 0; i < per; ++i) part = part + qr[i] * kv[gg][i];
#pragma unroll
                    for (int off = 16; off > 0; off >>= 1)
                        part = part + __shfl_down_sync(0xffffffffu, part, off);
                    const int jj = jb + gg * nwarps;
                    if (lane == 0 && jj < D) ps[jj] = part;
                }
            }
        }
        __syncthreads();
        const bool seen = live && j <= last;
        const float s = seen ? ps[t] : NEG_INF;
        const float chunk_max = group_max(red, t, D, s);  // every group joins the barriers
        const float m_new = live ? fmaxf(m, chunk_max) : m;
        const float p = seen ? expf(s - m_new) : 0.0f;
        ps[t] = p;
        const float psum = group_sum(red, t, D, p);  // its barriers order ps[] for the reads below
        if (live) {
            const float alpha = expf(m - m_new);  // 0 on the group's first chunk
            const int cn = min(D, last - c0 + 1);
            float a[ATT_GV];
#pragma unroll
            for (int gg = 0; gg < ATT_GV; ++gg) a[gg] = 0.0f;
            for (int jb = 0; jb < cn; jb += ATT_GV) {
                float vals[ATT_GV];
#pragma unroll
                for (int gg = 0; gg < ATT_GV; ++gg) {
                    const int jj = jb + gg;
                    const float ex = KIND == KIND_FP8 && jj < cn ? vex[jj] : 0.0f;
                    vals[gg] = jj < cn ? load_code<KIND>(vc, (long long)rows[jj] * D + t, ex) : 0.0f;
                }
#pragma unroll
                for (int gg = 0; gg < ATT_GV; ++gg)
                    if (jb + gg < cn) a[gg] = a[gg] + ps[jb + gg] * vals[gg];
            }
#pragma unroll
            for (int w = ATT_GV / 2; w > 0; w >>= 1)
#pragma unroll
                for (int gg = 0; gg < w; ++gg) a[gg] = a[gg] + a[gg + w];
            l = l * alpha + psum;
            acc = acc * alpha + a[0];
            m = m_new;
        }
        __syncthreads();
    }
    if (t == 0) {
        ms[g] = m;
        ls[g] = l;
    }
    sh[D + g * D + t] = acc;  // the groups' outputs, over their ps[] (no longer read)
    __syncthreads();
    if (g == 0) {
        float big = ms[0];
        for (int k = 1; k < ATT_NG; ++k) big = fmaxf(big, ms[k]);
        float total = 0.0f, sum = 0.0f;
        for (int k = 0; k < ATT_NG; ++k) {  // a group with no keys has m = -inf: weight 0
            const float w = expf(ms[k] - big);
            total = total + ls[k] * w;
            sum = sum + sh[D + k * D + t] * w;
        }
        out[((long long)r * hq + h) * D + t] = sum / total;
    }
}

extern "C" {

// x [rows_in, cols] float32 -> y [rows_out, cols] bf16 bits; rows past rows_in are zero
__global__ void to_bf16(const float* x, unsigned short* y, long long n_in, long long n_out) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n_out) y[i] = i < n_in ? f32_to_bf16(x[i]) : (unsigned short)0;
}

// y = x * (1 / sqrt(mean(x^2) + eps)) * w over the last axis of `cols`; one block per row.
// Where yb is not null, the same values as bf16 bits too (what to_bf16 would make of y: the
// input of the GEMM that follows, so it needs no conversion launch of its own).
__global__ void rms_norm(const float* x, const float* w, float* y, unsigned short* yb, int cols,
                         float eps) {
    extern __shared__ float red[];
    const float* xr = x + (long long)blockIdx.x * cols;
    float* yr = y + (long long)blockIdx.x * cols;
    float part = 0.0f;
    for (int i = threadIdx.x; i < cols; i += blockDim.x) part = part + xr[i] * xr[i];
    float var = tree_sum(red, part) / (float)cols;
    float inv = 1.0f / sqrtf(var + eps);
    for (int i = threadIdx.x; i < cols; i += blockDim.x) {
        const float v = (xr[i] * inv) * w[i];
        yr[i] = v;
        if (yb) yb[(long long)blockIdx.x * cols + i] = f32_to_bf16(v);
    }
}

// x [n, heads, D], cos/sin [n, D/2]: rotate_half as Hugging Face does
__global__ void rope(const float* x, const float* cos_t, const float* sin_t, float* y,
                     int heads, int half, long long total) {
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

// q and k of one qkv output row [n, stride] (q heads, then k heads, adjacent, D floats each):
// each head RMS-normed with its weight (qw for q heads, kw for k heads), then roped; written to
// q [n, hq, D] and k [n, hkv, D]. One block of D threads per (row, head); the norm is rms_norm's
// arithmetic at cols = D (a power of two <= 256: one element a thread, the same tree), the
// rotation rope's. One launch in place of copy, norm and RoPE of q and of k.
__global__ void qk_norm_rope(const float* qkv, long long stride, const float* qw, const float* kw,
                             const float* cos_t, const float* sin_t, float* qo, float* ko,
                             int hq, int hkv, float eps) {
    extern __shared__ float red[];  // D floats for the tree, then D for the normed head
    const int D = blockDim.x, t = threadIdx.x, half = D / 2;
    const long long row = blockIdx.x;
    const int hh = blockIdx.y;
    const bool is_q = hh < hq;
    const float x = qkv[row * stride + (long long)hh * D + t];
    const float var = tree_sum(red, 0.0f + x * x) / (float)D;
    const float inv = 1.0f / sqrtf(var + eps);
    float* nrm = red + D;
    nrm[t] = (x * inv) * (is_q ? qw : kw)[t];
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
    if (is_q)
        qo[(row * hq + hh) * D + t] = y;
    else
        ko[(row * hkv + (hh - hq)) * D + t] = y;
}

// y [n, inter] = silu(gate) * up; gate and up rows are `gs` and `us` floats apart (they may be
// the two halves of one fused gate_up output); where yb is not null, y's bf16 bits too
__global__ void silu_mul(const float* gate, const float* up, float* y, unsigned short* yb,
                         int inter, long long gs, long long us, long long total) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total) return;
    long long row = i / inter;
    int j = (int)(i % inter);
    float g = gate[row * gs + j], u = up[row * us + j];
    const float v = (g / (1.0f + expf(-g))) * u;
    y[i] = v;
    if (yb) yb[i] = f32_to_bf16(v);
}

// Encode rows k/v [n, Hkv, D] into their slots (page * page_rows + row) of the pages
// [slots, Hkv, D]; the bytes equal engine/kv/codec.py's. One block per (row, head),
// blockDim.x == D. Rows of x are `xstride` floats apart (a column slice of a wider output).
__global__ void kv_store(const float* x, const long long* slots, void* codes,
                         signed char* exps, int kind, int hkv, long long xstride) {
    extern __shared__ float red[];
    int D = blockDim.x, t = threadIdx.x;
    long long src = (long long)blockIdx.x * xstride + (long long)blockIdx.y * D;
    long long dst_row = slots[blockIdx.x] * hkv + blockIdx.y;
    float v = x[src + t];
    if (kind == KIND_F32) {
        ((float*)codes)[dst_row * D + t] = v;
    } else if (kind == KIND_BF16) {
        ((unsigned short*)codes)[dst_row * D + t] = f32_to_bf16(v);
    } else {
        float amax = tree_max(red, fabsf(v));
        int e;
        frexpf(amax, &e);  // frexp(0) gives 0, as numpy's
        int ex = min(max(e - 8, -128), 127);
        float scaled = fminf(fmaxf(ldexpf(v, -ex), -448.0f), 448.0f);
        ((unsigned char*)codes)[dst_row * D + t] = f32_to_e4m3(scaled);
        if (t == 0) exps[dst_row] = (signed char)ex;
    }
}

#define ATTEND_ARGS                                                                    \
    const float *q, const void *kc, const void *vc, const signed char *ke,             \
        const signed char *ve, const int *ptab, const int *poff, const int *last_pos,  \
        float *out, int hq, int hkv, int page_rows, float scale
#define ATTEND_PASS q, kc, vc, ke, ve, ptab, poff, last_pos, out, hq, hkv, page_rows, scale
// one kernel per code kind and head_dim (32, 64, 128, 256): attend_<kind>_<D>
// (launch bounds: at D = 256 a block has 1024 threads, which caps a thread at 64 registers)
#define ATTEND_KERNEL(NAME, KIND, D)                                     \
    __global__ void __launch_bounds__(ATT_NG * D) NAME##_##D(ATTEND_ARGS) { \
        attend_paged<KIND, D>(ATTEND_PASS);                              \
    }
#define ATTEND_KERNELS(D)                     \
    ATTEND_KERNEL(attend_f32, KIND_F32, D)   \
    ATTEND_KERNEL(attend_bf16, KIND_BF16, D) \
    ATTEND_KERNEL(attend_fp8, KIND_FP8, D)
ATTEND_KERNELS(32)
ATTEND_KERNELS(64)
ATTEND_KERNELS(128)
ATTEND_KERNELS(256)

}  // extern "C"
