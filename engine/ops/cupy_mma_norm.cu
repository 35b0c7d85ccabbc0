// The gate/up GEMM with the residual add and RMS norm before it in the same launch
// (options.norm_prologue, cupy_fused_linear.add_norm_silu), compiled after cupy_mma.cu: for a
// step of at most 8 rows (one tile of x rows, r0 = 0) every block makes the rows' s = a + b
// and add_rms_norm's bf16 y into its shared memory, then mma_silu's sums read them there. The
// norm keeps add_rms_norm's float operations in its order: NT virtual threads (add_rms_norm's
// block at K columns) each sum the squares of columns v, v + NT, .. in order (one fma each),
// then the same tree of pairs, the same divide and square root, (s * inv) * w. So the bits of
// add_rms_norm then linear_silu, one launch and one wait fewer; the first block
// (blockIdx.x == 0) writes s, the next residual.
struct NormRows {
    const float *a, *b, *wn;
    float* s;
    unsigned short* xsh;  // [8][K]: the rows' bf16 bits
    float* red;           // [8][NT]: their partial sums, then the trees
    int M, K, NT;
    float eps;

    __device__ __forceinline__ void operator()() const {
        const int R = blockDim.x;
        for (int e = threadIdx.x; e < M * NT; e += R) {
            const int row = e / NT, v = e - row * NT;
            const long long at = (long long)row * K;
            float part = 0.0f;
            for (int i = v; i < K; i += NT) {
                const float x = a[at + i] + b[at + i];
                part = __fmaf_rn(x, x, part);
            }
            red[row * NT + v] = part;
        }
        __syncthreads();
        for (int half = NT >> 1; half > 0; half >>= 1) {
            for (int e = threadIdx.x; e < M * half; e += R) {
                const int row = e / half, v = e - row * half;
                red[row * NT + v] = __fadd_rn(red[row * NT + v], red[row * NT + v + half]);
            }
            __syncthreads();
        }
        for (int e = threadIdx.x; e < M * K; e += R) {
            const int row = e / K, i = e - row * K;
            const float var = red[row * NT] / (float)K;
            const float inv = 1.0f / sqrtf(var + eps);
            const long long at = (long long)row * K + i;
            const float x = a[at] + b[at];
            xsh[e] = f32_to_bf16((x * inv) * wn[i]);
            if (blockIdx.x == 0) s[at] = x;
        }
        __syncthreads();
    }
};

// shared: mma_silu's part (S * 16 * 8 floats), then xsh, then red
template <int U>
__device__ __forceinline__ void mma_norm_silu(const float* a, const float* b, float* s,
                                              const float* wn, float eps, int nt,
                                              const unsigned short* w, float* y,
                                              unsigned short* yb, int M, int I, int K) {
    extern __shared__ float part[];
    unsigned short* xsh = (unsigned short*)(part + (blockDim.x >> 5) * 16 * 8);
    float* red = (float*)(xsh + 8 * K);
    mma_silu<1, U, true>(xsh, K, w, y, yb, M, I, K, NormRows{a, b, wn, s, xsh, red, M, K, nt, eps});
}

#define NORM_SILU_ARGS                                                                     \
    const float *a, const float *b, float *s, const float *wn, float eps, int nt,         \
        const unsigned short *w, float *y, unsigned short *yb, int M, int I, int K
extern "C" __global__ void __launch_bounds__(32 * MMA_MAX_SLICES, 3)
    mma_norm_silu_1u2(NORM_SILU_ARGS) {
    mma_norm_silu<2>(a, b, s, wn, eps, nt, w, y, yb, M, I, K);
}
extern "C" __global__ void __launch_bounds__(32 * MMA_MAX_SLICES)
    mma_norm_silu_1(NORM_SILU_ARGS) {
    mma_norm_silu<4>(a, b, s, wn, eps, nt, w, y, yb, M, I, K);
}
