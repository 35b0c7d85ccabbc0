// The backend's tensor-core GEMM (cupy_gemm.py, ENGINE_CUPY_GEMM=mma): y[M, N] (f32) =
// x[M, K] (bf16 bits) . w[N, K]^T (bf16 bits) by mma.sync m16n8k16 (bf16 in, f32 sums).
// w is the A operand (a tile of 16 weight rows), x the B operand (8 rows a tile), so a decode
// step's 8 rows fill one mma and a weight byte is read once a tile of x rows.
//
// The order of every output's sums depends on K alone: K is cut into chunks of 64; chunk j
// belongs to slice j % S (S = min(8, K / 64)), one warp of the block each, which adds its
// chunks in ascending j into one accumulator, a chunk as 4 mma steps of 16 k's in a fixed
// placement (lane quad t's 16-byte loads at 8t and 32 + 8t; step s takes words 2(s%2),
// 2(s%2)+1 of the first load for s < 2, of the second after); the S slice sums are then
// added in slice order. Which block, warp or tile of x rows computes (row, n), how many rows
// the launch has and what they hold never change that arithmetic: no atomics, no split
// across blocks, no shape-dependent order. K % 64 == 0 (16-byte loads).
#define MMA_CHUNK 64
#define MMA_MAX_SLICES 8

__device__ __forceinline__ void mma_16816(float* d, unsigned a0, unsigned a1, unsigned a2,
                                          unsigned a3, unsigned b0, unsigned b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// one chunk: weight rows g (p, q) and g + 8 (P, Q), x row g of a tile (xp, xq)
__device__ __forceinline__ void mma_chunk(float* d, const uint4& p, const uint4& q,
                                          const uint4& P, const uint4& Q, const uint4& xp,
                                          const uint4& xq) {
    mma_16816(d, p.x, P.x, p.y, P.y, xp.x, xp.y);
    mma_16816(d, p.z, P.z, p.w, P.w, xp.z, xp.w);
    mma_16816(d, q.x, Q.x, q.y, Q.y, xq.x, xq.y);
    mma_16816(d, q.z, Q.z, q.w, Q.w, xq.z, xq.w);
}

__device__ __forceinline__ uint4 ld16(const unsigned short* p) {
    return __ldg(reinterpret_cast<const uint4*>(p));
}

// U chunks of a warp's weight rows from chunk j on, every S-th (none past the end); HALF:
// tile rows 8-15 are rows 0-7 again (wb == wa), their sums never written
template <int U, bool HALF = false>
__device__ __forceinline__ void mma_load(uint4* p, uint4* q, uint4* P, uint4* Q,
                                         const unsigned short* wa, const unsigned short* wb,
                                         int j, int S, int chunks) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
        if (j + u * S < chunks) {  // the same for the whole warp
            const int c = (j + u * S) * MMA_CHUNK;
            p[u] = ld16(wa + c);
            q[u] = ld16(wa + c + 32);
            P[u] = HALF ? p[u] : ld16(wb + c);
            Q[u] = HALF ? q[u] : ld16(wb + c + 32);
        }
    }
}

// The block's slice sums of the weight rows at wa (tile rows 0-7, by g) and wb (rows 8-15)
// over the x rows r0.. (8 T of them): part[slice][x row of the block][weight row], then a
// barrier. T: tiles of 8 x rows a warp takes; U: chunks a warp loads before its first mma
// (bytes in flight). Neither changes a sum.
template <int T, int U, bool HALF = false>
__device__ __forceinline__ void mma_slices(const unsigned short* __restrict__ x, long long xs,
                                           const unsigned short* __restrict__ wa,
                                           const unsigned short* __restrict__ wb, int r0, int M,
                                           int K, float* part) {
    const int S = blockDim.x >> 5, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    const int chunks = K / MMA_CHUNK;
    wa += 8 * t;
    wb += 8 * t;
    const unsigned short* xr[T];
#pragma unroll
    for (int i = 0; i < T; ++i) xr[i] = x + (long long)min(r0 + 8 * i + g, M - 1) * xs + 8 * t;
    float acc[T][4];
#pragma unroll
    for (int i = 0; i < T; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
    // the first loads of weights come before PDL_ENTRY: weights are no kernel's output, so
    // their fetch overlaps the kernel before; x is read only after it has finished
    uint4 p[U], q[U], P[U], Q[U];
    mma_load<U, HALF>(p, q, P, Q, wa, wb, warp, S, chunks);
    PDL_ENTRY();
    for (int j0 = warp; j0 < chunks; j0 += S * U) {
#pragma unroll
        for (int u = 0; u < U; ++u) {
            if (j0 + u * S >= chunks) break;  // the same for the whole warp
            const int c = (j0 + u * S) * MMA_CHUNK;
#pragma unroll
            for (int i = 0; i < T; ++i) {
                const uint4 xp = ld16(xr[i] + c), xq = ld16(xr[i] + c + 32);
                mma_chunk(acc[i], p[u], q[u], P[u], Q[u], xp, xq);
            }
        }
        mma_load<U, HALF>(p, q, P, Q, wa, wb, j0 + S * U, S, chunks);
    }
    const int cols = 8 * T;
#pragma unroll
    for (int i = 0; i < T; ++i) {
        float* at = part + ((long long)warp * cols + 8 * i + 2 * t) * 16;
        at[g] = acc[i][0];
        at[16 + g] = acc[i][1];
        at[g + 8] = acc[i][2];
        at[16 + g + 8] = acc[i][3];
    }
    __syncthreads();
}

// entry e of the block's tile ([x row][weight row]) summed over the slices in slice order
__device__ __forceinline__ float slice_sum(const float* part, int e, int tile) {
    float s = part[e];
    for (int v = 1; v < (int)(blockDim.x >> 5); ++v) s += part[v * tile + e];
    return s;
}

// grid (ceil(N / 16), ceil(M / (8 T))), block 32 S, shared S * 16 * 8 T floats. HALF: a
// block's 8 outputs (grid ceil(N / 8)), the mma's other 8 weight rows the same 8 again: a
// row's sums depend on its own weight row alone, so twice the blocks stream the weights of
// a small N with the same bits.
template <int T, int U, bool HALF = false>
__device__ __forceinline__ void mma_gemm(const unsigned short* __restrict__ x, long long xs,
                                         const unsigned short* __restrict__ w,
                                         float* __restrict__ y, int M, int N, int K) {
    extern __shared__ float part[];
    const int g = (threadIdx.x & 31) >> 2;
    const int n0 = blockIdx.x * (HALF ? 8 : 16), r0 = blockIdx.y * 8 * T;
    // rows past N or M read the last real one; their sums are never written
    const unsigned short* wa = w + (long long)min(n0 + g, N - 1) * K;
    mma_slices<T, U, HALF>(x, xs, wa, HALF ? wa : w + (long long)min(n0 + g + 8, N - 1) * K, r0,
                           M, K, part);
    const int tile = 16 * 8 * T;
    for (int e = threadIdx.x; e < tile; e += blockDim.x) {
        const int n = n0 + (e & 15), r = r0 + (e >> 4);
        if (HALF && (e & 15) >= 8) continue;
        const float s = slice_sum(part, e, tile);
        if (n < N && r < M) y[(long long)r * N + n] = s;
    }
}

// y [M, I] = silu(gate) * up of a gate_up weight w [2 I, K] (the I gate rows, then the I up
// rows) and its bf16 bits into yb where not null: a block's 16-row tile is the gate rows
// n0..n0+7 and the up rows of the same outputs, so an output's two sums (each mma_gemm's, in
// its order) meet in one block, then silu_mul's float operations (cupy_kernels.cu).
// grid (ceil(I / 8), ceil(M / (8 T))).
template <int T, int U>
__device__ __forceinline__ void mma_silu(const unsigned short* __restrict__ x, long long xs,
                                         const unsigned short* __restrict__ w,
                                         float* __restrict__ y, unsigned short* __restrict__ yb,
                                         int M, int I, int K) {
    extern __shared__ float part[];
    const int g = (threadIdx.x & 31) >> 2;
    const int n0 = blockIdx.x * 8, r0 = blockIdx.y * 8 * T;
    const long long gate = min(n0 + g, I - 1);
    mma_slices<T, U>(x, xs, w + gate * K, w + (I + gate) * K, r0, M, K, part);
    const int tile = 16 * 8 * T;
    for (int e = threadIdx.x; e < 8 * 8 * T; e += blockDim.x) {
        const int j = e & 7, rr = e >> 3, n = n0 + j, r = r0 + rr;
        const float gs = slice_sum(part, rr * 16 + j, tile);
        const float us = slice_sum(part, rr * 16 + 8 + j, tile);
        if (n < I && r < M) {
            const float v = (gs / (1.0f + expf(-gs))) * us;
            const long long o = (long long)r * I + n;
            y[o] = v;
            if (yb) yb[o] = f32_to_bf16(v);
        }
    }
}

#define MMA_KERNEL(T, U)                                                                      \
    extern "C" __global__ void mma_gemm_##T(const unsigned short* x, long long xs,            \
                                            const unsigned short* w, float* y, int M, int N, \
                                            int K) {                                          \
        mma_gemm<T, U>(x, xs, w, y, M, N, K);                                                 \
    }                                                                                         \
    extern "C" __global__ void mma_silu_##T(const unsigned short* x, long long xs,            \
                                            const unsigned short* w, float* y,               \
                                            unsigned short* yb, int M, int I, int K) {        \
        mma_silu<T, U>(x, xs, w, y, yb, M, I, K);                                             \
    }
MMA_KERNEL(1, 4)
MMA_KERNEL(2, 2)
MMA_KERNEL(4, 1)
MMA_KERNEL(8, 1)

// mma_gemm_1u2, mma_silu_1u2: T = 1 with two chunks in flight, for K whose warps have at most
// two chunks (cupy_gemm.mma_kernel): what U = 4 loads ahead there is never used, and its
// registers (97 a thread) leave room for two blocks an SM, so the gate/up GEMM's 384 blocks
// of a decode step ran in two waves on 132 SMs; these fit three. The same sums.
extern "C" __global__ void __launch_bounds__(32 * MMA_MAX_SLICES, 3)
    mma_gemm_1u2(const unsigned short* x, long long xs, const unsigned short* w, float* y,
                 int M, int N, int K) {
    mma_gemm<1, 2>(x, xs, w, y, M, N, K);
}
// mma_gemm_1u6: T = 1 with six chunks in flight, for K whose warps have five or six chunks
// (the down projection, K 3072): all of a warp's weights are asked for before PDL_ENTRY
// (U = 4 left two chunks to fetch after the kernel before had finished). Such GEMMs have few
// blocks (N / 16: 64 at N 1024), one an SM, so the registers cost no occupancy.
extern "C" __global__ void __launch_bounds__(32 * MMA_MAX_SLICES, 1)
    mma_gemm_1u6(const unsigned short* x, long long xs, const unsigned short* w, float* y,
                 int M, int N, int K) {
    mma_gemm<1, 6>(x, xs, w, y, M, N, K);
}
// mma_gemm_1h, mma_gemm_1u6h: the same with a block's 8 outputs (HALF), for N whose
// 16-row blocks would fill at most half the SMs (o and down, N 1024: 128 blocks, not 64)
extern "C" __global__ void __launch_bounds__(32 * MMA_MAX_SLICES)
    mma_gemm_1h(const unsigned short* x, long long xs, const unsigned short* w, float* y,
                int M, int N, int K) {
    mma_gemm<1, 4, true>(x, xs, w, y, M, N, K);
}
extern "C" __global__ void __launch_bounds__(32 * MMA_MAX_SLICES, 1)
    mma_gemm_1u6h(const unsigned short* x, long long xs, const unsigned short* w, float* y,
                  int M, int N, int K) {
    mma_gemm<1, 6, true>(x, xs, w, y, M, N, K);
}
extern "C" __global__ void __launch_bounds__(32 * MMA_MAX_SLICES, 3)
    mma_silu_1u2(const unsigned short* x, long long xs, const unsigned short* w, float* y,
                 unsigned short* yb, int M, int I, int K) {
    mma_silu<1, 2>(x, xs, w, y, yb, M, I, K);
}

