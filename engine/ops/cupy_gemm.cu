// The backend's own GEMM (cupy_gemm.py): y[M, N] (f32) = x[M, K] (bf16 bits) . w[N, K]^T
// (bf16 bits), products and sums in f32. Every output (row, n) is computed by one warp in one
// fixed order that depends on K alone: lane l takes the chunks of 8 at 8 (l + 32 i), i
// ascending, each chunk's 8 products added in index order (fmaf) into the row's own
// accumulator, then a fixed shuffle-down tree. So a row's bits never depend on M, on the
// row's place in the launch, on its neighbours' values or on how many outputs a warp takes
// (OUTS): one kernel for a decode step, a verify step and a prompt step alike. No
// atomics, no split-K, no shape-dependent algorithm. K % 8 == 0 (16-byte loads).
#define GEMM_ROWS 8    // rows a block takes (grid.y: row groups); a warp keeps one sum per row
#define GEMM_WARPS 8   // warps per block
#define GEMM_U 4       // chunks of 8 a lane loads at once (memory in flight; order unchanged)

__device__ __forceinline__ void bf16x8(const uint4 q, float* f) {
    f[0] = __uint_as_float(q.x << 16);
    f[1] = __uint_as_float(q.x & 0xffff0000u);
    f[2] = __uint_as_float(q.y << 16);
    f[3] = __uint_as_float(q.y & 0xffff0000u);
    f[4] = __uint_as_float(q.z << 16);
    f[5] = __uint_as_float(q.z & 0xffff0000u);
    f[6] = __uint_as_float(q.w << 16);
    f[7] = __uint_as_float(q.w & 0xffff0000u);
}

// grid (ceil(N / (GEMM_WARPS * OUTS)), ceil(M / GEMM_ROWS)), block 32 * GEMM_WARPS; x rows
// xs elements apart.
template <int OUTS>
__device__ __forceinline__ void gemm_rows(const unsigned short* __restrict__ x, long long xs,
                                          const unsigned short* __restrict__ w,
                                          float* __restrict__ y, int M, int N, int K) {
    const int lane = threadIdx.x & 31;
    const int n0 = (blockIdx.x * GEMM_WARPS + (threadIdx.x >> 5)) * OUTS;
    if (n0 >= N) return;
    const int r0 = blockIdx.y * GEMM_ROWS;
    const int rows = min(GEMM_ROWS, M - r0);
    const unsigned short* xr = x + (long long)r0 * xs;
    float acc[OUTS][GEMM_ROWS];
#pragma unroll
    for (int o = 0; o < OUTS; ++o)
#pragma unroll
        for (int r = 0; r < GEMM_ROWS; ++r) acc[o][r] = 0.0f;
    // GEMM_U chunks a lane at a time: their loads are all issued before the first product
    for (int c0 = lane * 8; c0 < K; c0 += 256 * GEMM_U) {
        uint4 wq[OUTS][GEMM_U];
#pragma unroll
        for (int o = 0; o < OUTS; ++o) {
            // a warp's outputs past N read output N - 1's weight and are not written
            const long long n = min(n0 + o, N - 1);
#pragma unroll
            for (int u = 0; u < GEMM_U; ++u) {
                const int c = c0 + 256 * u;
                wq[o][u] = c < K ? __ldg((const uint4*)(w + n * K + c)) : make_uint4(0, 0, 0, 0);
            }
        }
#pragma unroll
        for (int r = 0; r < GEMM_ROWS; ++r) {
            // rows past the group's count load the last row (unconditional loads, so the
            // compiler may issue every row's before the first product) and add nothing
            const int rr = min(r, rows - 1);
            uint4 xq[GEMM_U];
#pragma unroll
            for (int u = 0; u < GEMM_U; ++u) {
                const int c = c0 + 256 * u;
                xq[u] = c < K ? __ldg((const uint4*)(xr + rr * xs + c)) : make_uint4(0, 0, 0, 0);
            }
            if (r < rows) {
#pragma unroll
                for (int u = 0; u < GEMM_U; ++u) {
                    if (c0 + 256 * u < K) {  // chunk i = c / 256 ascending, as one loop would
                        float xf[8];
                        bf16x8(xq[u], xf);
#pragma unroll
                        for (int o = 0; o < OUTS; ++o) {
                            float wf[8];
                            bf16x8(wq[o][u], wf);
#pragma unroll
                            for (int j = 0; j < 8; ++j) acc[o][r] = fmaf(xf[j], wf[j], acc[o][r]);
                        }
                    }
                }
            }
        }
    }
#pragma unroll
    for (int o = 0; o < OUTS; ++o)
#pragma unroll
        for (int r = 0; r < GEMM_ROWS; ++r) {
            float s = acc[o][r];
            for (int d = 16; d; d >>= 1) s += __shfl_down_sync(0xffffffffu, s, d);
            if (lane == 0 && r < rows && n0 + o < N) y[(long long)(r0 + r) * N + n0 + o] = s;
        }
}

extern "C" __global__ void own_gemm1(const unsigned short* x, long long xs,
                                     const unsigned short* w, float* y, int M, int N, int K) {
    PDL_ENTRY();
    gemm_rows<1>(x, xs, w, y, M, N, K);
}

extern "C" __global__ void own_gemm2(const unsigned short* x, long long xs,
                                     const unsigned short* w, float* y, int M, int N, int K) {
    PDL_ENTRY();
    gemm_rows<2>(x, xs, w, y, M, N, K);
}
