// Mixture-of-experts kernels of the cupy backend (appended to cupy_kernels.cu's module; see
// cupy_moe.py). Every value of a row is computed by blocks of its own, in one fixed order
// that depends on the weight shape only: a row's bits never depend on the other rows of the
// launch, on how many rows chose the same expert, or on the launch's row count. No atomics.
//
// warp_dot: x[0..K) (f32) . w[0..K) (bf16 bits), K % 8 == 0: lane l takes the chunks of 8
// at 8 (l + 32 i), i ascending, each chunk's products added in index order (fmaf), then a
// fixed shuffle-down tree whose result lane 0 holds; broadcast from lane 0.
#define MOE_WARPS 8     // warps per block: each computes one output column
#define MOE_MAX_K 32    // top-k the routing kernel takes

__device__ __forceinline__ float warp_dot(const float* x, const unsigned short* w, int K) {
    const int lane = threadIdx.x & 31;
    float s = 0.0f;
    for (int c = lane * 8; c < K; c += 256) {
        const uint4 q = *(const uint4*)(w + c);
        const float4 a = *(const float4*)(x + c);
        const float4 b = *(const float4*)(x + c + 4);
        s = fmaf(a.x, __uint_as_float(q.x << 16), s);
        s = fmaf(a.y, __uint_as_float(q.x & 0xffff0000u), s);
        s = fmaf(a.z, __uint_as_float(q.y << 16), s);
        s = fmaf(a.w, __uint_as_float(q.y & 0xffff0000u), s);
        s = fmaf(b.x, __uint_as_float(q.z << 16), s);
        s = fmaf(b.y, __uint_as_float(q.z & 0xffff0000u), s);
        s = fmaf(b.z, __uint_as_float(q.w << 16), s);
        s = fmaf(b.w, __uint_as_float(q.w & 0xffff0000u), s);
    }
    for (int o = 16; o; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
    return __shfl_sync(0xffffffffu, s, 0);
}

// y[row, n] = x[row] . w[n] for one bf16 weight [N, K]: grid (rows, ceil(N / MOE_WARPS)).
extern "C" __global__ void expert_gemv(const float* x, const unsigned short* w, float* y,
                                       int N, int K) {
    PDL_ENTRY();
    const int n = blockIdx.y * MOE_WARPS + (threadIdx.x >> 5);
    if (n >= N) return;
    const long long row = blockIdx.x;
    const float v = warp_dot(x + row * K, w + (long long)n * K, K);
    if ((threadIdx.x & 31) == 0) y[row * N + n] = v;
}

// Routing, one thread per row: softmax in f32 (the row's max; expf(z - max); a left-to-right
// sum), top-k by repeated selection of the largest probability, a strict > over ascending
// ids (ties: the lower id), optional renormalisation by the left-to-right sum over ranks.
extern "C" __global__ void moe_route(const float* logits, int rows, int E, int k, int norm,
                                     int* ids, float* wts) {
    PDL_ENTRY();
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    const float* z = logits + (long long)row * E;
    float mx = z[0];
    for (int j = 1; j < E; ++j) mx = fmaxf(mx, z[j]);
    float total = expf(z[0] - mx);
    for (int j = 1; j < E; ++j) total = total + expf(z[j] - mx);
    int got[MOE_MAX_K];
    float w[MOE_MAX_K];
    for (int r = 0; r < k; ++r) {
        int best = -1;
        float bp = 0.0f;
        for (int j = 0; j < E; ++j) {
            bool used = false;
            for (int q = 0; q < r; ++q) used = used || got[q] == j;
            if (used) continue;
            const float p = expf(z[j] - mx) / total;
            if (best < 0 || p > bp) { best = j; bp = p; }
        }
        got[r] = best;
        w[r] = bp;
    }
    float denom = w[0];
    for (int r = 1; r < k; ++r) denom = denom + w[r];
    for (int r = 0; r < k; ++r) {
        ids[(long long)row * k + r] = got[r];
        wts[(long long)row * k + r] = norm ? w[r] / denom : w[r];
    }
}

// h[p, j] = silu(x[row] . gate_e[j]) * (x[row] . up_e[j]) for pair p = row * k + rank, expert
// e = ids[p], weights gu [E, 2I, H] (gate rows, then up rows): grid (pairs, ceil(I / warps)).
// silu * up as silu_mul computes it.
extern "C" __global__ void moe_gate_up(const float* x, const int* ids, const unsigned short* gu,
                                       float* h, int k, int H, int I) {
    PDL_ENTRY();
    const int j = blockIdx.y * MOE_WARPS + (threadIdx.x >> 5);
    if (j >= I) return;
    const long long p = blockIdx.x;
    const float* xr = x + (p / k) * H;
    const unsigned short* we = gu + (long long)ids[p] * 2 * I * H;
    const float g = warp_dot(xr, we + (long long)j * H, H);
    const float u = warp_dot(xr, we + (long long)(I + j) * H, H);
    if ((threadIdx.x & 31) == 0) h[p * I + j] = (g / (1.0f + expf(-g))) * u;
}

// y[row, c] = sum over ranks r (in rank order) of wts[row, r] * (h[row k + r] . down_e[c]),
// weights down [E, H, I]: grid (rows, ceil(H / warps)). Products and sums rounded one by one
// (no fma), as scale_rows then add compute them.
extern "C" __global__ void moe_down(const float* h, const int* ids, const float* wts,
                                    const unsigned short* down, float* y, int k, int H, int I) {
    PDL_ENTRY();
    const int c = blockIdx.y * MOE_WARPS + (threadIdx.x >> 5);
    if (c >= H) return;
    const long long row = blockIdx.x;
    float acc = 0.0f;
    for (int r = 0; r < k; ++r) {
        const long long p = row * k + r;
        const unsigned short* we = down + ((long long)ids[p] * H + c) * I;
        const float v = __fmul_rn(wts[p], warp_dot(h + p * I, we, I));
        acc = r ? __fadd_rn(acc, v) : v;
    }
    if ((threadIdx.x & 31) == 0) y[row * H + c] = acc;
}
