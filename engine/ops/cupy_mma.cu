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

// U chunks of a warp's weight rows from chunk j on, every S-th (none past the end)
template <int U>
__device__ __forceinline__ void mma_load(uint4* p, uint4* q, uint4* P, uint4* Q,
                                         const unsigned short* wa, const unsigned short* wb,
                                         int j, int S, int chunks) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
        if (j + u * S < chunks) {  // the same for the whole warp
            const int c = (j + u * S) * MMA_CHUNK;
            p[u] = ld16(wa + c);
            q[u] = ld16(wa + c + 32);
            P[u] = ld16(wb + c);
            Q[u] = ld16(wb + c + 32);
        }
    }
}

// grid (ceil(N / 16), ceil(M / (8 T))), block 32 S, shared S * 16 * 8 T floats.
// T: tiles of 8 x rows a warp takes; U: chunks a warp loads before its first mma (bytes in
// flight). Neither changes a sum.
template <int T, int U>
__device__ __forceinline__ void mma_gemm(const unsigned short* __restrict__ x, long long xs,
                                         const unsigned short* __restrict__ w,
                                         float* __restrict__ y, int M, int N, int K) {
    extern __shared__ float part[];
    const int S = blockDim.x >> 5, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    const int n0 = blockIdx.x * 16, r0 = blockIdx.y * 8 * T;
    const int chunks = K / MMA_CHUNK;
    // rows past N or M read the last real one; their sums are never written
    const unsigned short* wa = w + (long long)min(n0 + g, N - 1) * K + 8 * t;
    const unsigned short* wb = w + (long long)min(n0 + g + 8, N - 1) * K + 8 * t;
    const unsigned short* xr[T];
#pragma unroll
    for (int i = 0; i < T; ++i) xr[i] = x + (long long)min(r0 + 8 * i + g, M - 1) * xs + 8 * t;
    float acc[T][4];
#pragma unroll
    for (int i = 0; i < T; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
    // the first loads of weights come before PDL_ENTRY: weights are no kernel's output, so
    // their fetch overlaps the kernel before; x is read only after it has finished
    uint4 p[U], q[U], P[U], Q[U];
    mma_load<U>(p, q, P, Q, wa, wb, warp, S, chunks);
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
        mma_load<U>(p, q, P, Q, wa, wb, j0 + S * U, S, chunks);
    }
    // slice sums to shared memory, [slice][x row of the block][weight row]
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
    for (int e = threadIdx.x; e < 16 * cols; e += blockDim.x) {
        const int n = n0 + (e & 15), r = r0 + (e >> 4);
        float s = part[e];
        for (int v = 1; v < S; ++v) s += part[v * 16 * cols + e];
        if (n < N && r < M) y[(long long)r * N + n] = s;
    }
}

#define MMA_KERNEL(T, U)                                                                      \
    extern "C" __global__ void mma_gemm_##T(const unsigned short* x, long long xs,            \
                                            const unsigned short* w, float* y, int M, int N, \
                                            int K) {                                          \
        mma_gemm<T, U>(x, xs, w, y, M, N, K);                                                 \
    }
MMA_KERNEL(1, 4)
MMA_KERNEL(2, 2)
MMA_KERNEL(4, 1)
MMA_KERNEL(8, 1)
