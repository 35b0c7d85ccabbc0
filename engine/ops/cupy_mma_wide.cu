// The mma GEMM for many rows (a prompt step): the sums of mma_gemm and mma_silu (cupy_mma.cu),
// every output's chunks, slices and slice order as there, each chunk's 16 k's in the same mma
// slots; only where the operands come from changes. A block takes 64 weight rows by 64 x rows;
// chunk after chunk (64 k's), the tiles of both are staged in shared memory by cp.async (three
// stages in flight), so a weight byte is read from memory once a 64 x rows where mma_gemm
// reads it once an 8, and four warps run 32 mma of a chunk each per staged tile pair.
//
// A warp's 32 x 32 outputs keep two sums each: the slice's (chunks s, s + S, ... in ascending
// order, from zero) and the total (slice 0's, then + slice 1's, + ... in slice order): the
// chunks are walked slice by slice. Outputs past N or M read the last real row and are never
// written; K % 64 == 0.
#define WIDE_ROWS 64   // weight rows and x rows a block
#define WIDE_STAGES 3  // chunks in flight
// chunks in flight where a launch has no more blocks than the device has SMs (the o and down
// GEMMs of a 512-token prompt: 128 blocks, one an SM): its bytes in flight are what feeds the
// mma (mma_wide_gemm_deep, options.wide_deep; the same sums, only the staging goes deeper)
#define WIDE_DEEP_STAGES 8
#define WIDE_UNITS (WIDE_ROWS * 8)  // 16-byte pieces of one operand's tile of a chunk

// the shared slot of a tile's 16-byte piece u (0..7) of row r: the halves swap on odd rows, so
// a quarter warp's loads (rows g, g+1 at pieces t or 4 + t) fall on distinct banks
__device__ __forceinline__ int wide_slot(int r, int u) { return r * 8 + (u ^ ((r & 1) << 2)); }

// the walk over a K of `chunks` chunks in slice order: (slice s, chunk j)
struct WideWalk {
    int s, j, S, chunks;
    __device__ __forceinline__ void next() {
        j += S;
        if (j >= chunks) j = ++s;
    }
};

// the weight row of the block's tile row r (0..63): plain, 64 weight rows from n0; SILU, for
// outputs n0..n0+31 (warp column c = r / 32: outputs n0 + 16 c ..), m-tile 0 the gate rows and
// m-tile 1 the up rows (I on) of the same 16 outputs, so a thread holds both sums of an output
template <bool SILU>
__device__ __forceinline__ long long wide_weight_row(int r, int n0, int N) {
    if (!SILU) return min(n0 + r, N - 1);
    const int out = min(n0 + 16 * (r >> 5) + (r & 15), N - 1);
    return ((r >> 4) & 1) ? (long long)N + out : out;
}

template <bool SILU>
__device__ __forceinline__ void wide_stage(uint4* sw, const unsigned short* __restrict__ x,
                                           long long xs, const unsigned short* __restrict__ w,
                                           int n0, int r0, int M, int N, int K, int j) {
    uint4* sx = sw + WIDE_UNITS;
    const int c = j * MMA_CHUNK;
    for (int e = threadIdx.x; e < WIDE_UNITS; e += blockDim.x) {
        const int r = e >> 3, u = e & 7;
        copy16_async(sw + wide_slot(r, u), w + wide_weight_row<SILU>(r, n0, N) * K + c + 8 * u);
        copy16_async(sx + wide_slot(r, u), x + (long long)min(r0 + r, M - 1) * xs + c + 8 * u);
    }
}

// grid (ceil(N / 64), ceil(M / 64)) plain, (ceil(I / 32), ..) SILU (N = I); block 128,
// shared STAGES * 2 * WIDE_UNITS * 16 bytes (48 KB at WIDE_STAGES)
template <bool SILU, int STAGES = WIDE_STAGES>
__device__ __forceinline__ void mma_wide(const unsigned short* __restrict__ x, long long xs,
                                         const unsigned short* __restrict__ w,
                                         float* __restrict__ y, unsigned short* __restrict__ yb,
                                         int M, int N, int K) {
    extern __shared__ uint4 stages[];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int n0 = blockIdx.x * (SILU ? 32 : WIDE_ROWS), r0 = blockIdx.y * WIDE_ROWS;
    const int wn = (warp & 1) * 32, wr = (warp >> 1) * 32;  // the warp's tile rows, x rows
    const int chunks = K / MMA_CHUNK, S = min(MMA_MAX_SLICES, chunks);
    float total[2][4][4], part[2][4][4];
    PDL_ENTRY();
    WideWalk load = {0, 0, S, chunks}, run = load;
#pragma unroll
    for (int q = 0; q < STAGES - 1; ++q) {
        if (q < chunks) wide_stage<SILU>(stages + q * 2 * WIDE_UNITS, x, xs, w, n0, r0, M, N, K, load.j);
        asm volatile("cp.async.commit_group;\n" ::);
        load.next();
    }
    for (int q = 0; q < chunks; ++q) {
        asm volatile("cp.async.wait_group %0;\n" ::"n"(STAGES - 2));
        __syncthreads();  // chunk q is in; every warp is done with the stage it overwrites next
        if (q + STAGES - 1 < chunks)
            wide_stage<SILU>(stages + ((q + STAGES - 1) % STAGES) * 2 * WIDE_UNITS, x, xs,
                             w, n0, r0, M, N, K, load.j);
        asm volatile("cp.async.commit_group;\n" ::);
        load.next();
        const uint4* sw = stages + (q % STAGES) * 2 * WIDE_UNITS;
        const uint4* sx = sw + WIDE_UNITS;
        const bool first = run.j == run.s;  // the slice's first chunk: its sums start at zero
        uint4 a[2][4], b[4][2];
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const int r = wn + 16 * i + g;  // rows g and g + 8 of m-tile i: pieces t, 4 + t
            a[i][0] = sw[wide_slot(r, t)];
            a[i][1] = sw[wide_slot(r, 4 + t)];
            a[i][2] = sw[wide_slot(r + 8, t)];
            a[i][3] = sw[wide_slot(r + 8, 4 + t)];
        }
#pragma unroll
        for (int n = 0; n < 4; ++n) {
            b[n][0] = sx[wide_slot(wr + 8 * n + g, t)];
            b[n][1] = sx[wide_slot(wr + 8 * n + g, 4 + t)];
        }
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
            for (int n = 0; n < 4; ++n) {
                float* d = part[i][n];
                if (first) d[0] = d[1] = d[2] = d[3] = 0.0f;
                mma_chunk(d, a[i][0], a[i][1], a[i][2], a[i][3], b[n][0], b[n][1]);
            }
        const int s = run.s;
        run.next();
        if (run.s != s) {  // the slice is done: into the total, in slice order
#pragma unroll
            for (int i = 0; i < 2; ++i)
#pragma unroll
                for (int n = 0; n < 4; ++n)
#pragma unroll
                    for (int e = 0; e < 4; ++e)
                        total[i][n][e] = s == 0 ? part[i][n][e] : total[i][n][e] + part[i][n][e];
        }
    }
    // d[e]: weight row g + 8 (e >> 1) of the m-tile, x row 2t + (e & 1) of the n-tile
#pragma unroll
    for (int n = 0; n < 4; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int r = r0 + wr + 8 * n + 2 * t + (e & 1);
            if (r >= M) continue;
            if (SILU) {
                const int o = n0 + (wn >> 1) + g + 8 * (e >> 1);
                if (o >= N) continue;
                const float gs = total[0][n][e], us = total[1][n][e];
                const float v = (gs / (1.0f + expf(-gs))) * us;
                y[(long long)r * N + o] = v;
                if (yb) yb[(long long)r * N + o] = f32_to_bf16(v);
            } else {
#pragma unroll
                for (int i = 0; i < 2; ++i) {
                    const int o = n0 + wn + 16 * i + g + 8 * (e >> 1);
                    if (o < N) y[(long long)r * N + o] = total[i][n][e];
                }
            }
        }
}

extern "C" __global__ void __launch_bounds__(128)
    mma_wide_gemm(const unsigned short* x, long long xs, const unsigned short* w, float* y, int M,
                  int N, int K) {
    mma_wide<false>(x, xs, w, y, nullptr, M, N, K);
}

extern "C" __global__ void __launch_bounds__(128)
    mma_wide_gemm_deep(const unsigned short* x, long long xs, const unsigned short* w, float* y,
                       int M, int N, int K) {
    mma_wide<false, WIDE_DEEP_STAGES>(x, xs, w, y, nullptr, M, N, K);
}

extern "C" __global__ void __launch_bounds__(128)
    mma_wide_silu(const unsigned short* x, long long xs, const unsigned short* w, float* y,
                  unsigned short* yb, int M, int I, int K) {
    mma_wide<true>(x, xs, w, y, yb, M, I, K);
}
