// Parts of a chunk pass shared by the attention kernels (cupy_attend.cu, cupy_attend_tile.cu),
// compiled after cupy_attend_stage.cu: the value pass, the merge of the groups, and the trees
// of two sets of values side by side (a split block's last chunk taken with the one before:
// cupy_attend.cu, `tail`).

// The groups' (max, sum, output) merged in group order; out[at + t] and its bf16 bits.
template <int D>
__device__ __forceinline__ void attend_finish(const float* ms, const float* ls, const float* accs,
                                              int t, float* out, unsigned short* outb,
                                              long long at) {
    float big = ms[0];
    for (int k = 1; k < ATT_NG; ++k) big = fmaxf(big, ms[k]);
    float total = 0.0f, sum = 0.0f;
    for (int k = 0; k < ATT_NG; ++k) {  // a group with no keys has m = -inf: weight 0
        const float w = expf(ms[k] - big);
        total = total + ls[k] * w;
        sum = sum + accs[k * D + t] * w;
    }
    const float o = sum / total;
    out[at + t] = o;
    if (outb) outb[at + t] = f32_to_bf16(o);  // the o GEMM's input
}

// Keys jb .. jb + ATT_GV - 1 of a chunk's value pass, all of them in the chunk: the guarded
// loop's float operations in its order, without its tests a key, the weights ps[] read four
// at a time (ps + jb is 16-byte aligned: jb is a multiple of ATT_GV, ps a multiple of D
// floats into the block's shared memory).
template <int KIND, int D, bool STAGE>
__device__ __forceinline__ void value_run(float* a, const float* ps, const void* vread,
                                          const int* rows, const float* vex, int jb, int t) {
    float vals[ATT_GV];
#pragma unroll
    for (int gg = 0; gg < ATT_GV; ++gg) {
        const int jj = jb + gg;
        const float ex = KIND == KIND_FP8 ? vex[jj] : 0.0f;
        const long long at = (STAGE ? (long long)jj : (long long)rows[jj]) * D + t;
        vals[gg] = load_code<KIND>(vread, at, ex);
    }
    const float4* w = reinterpret_cast<const float4*>(ps + jb);
#pragma unroll
    for (int k = 0; k < ATT_GV / 4; ++k) {
        const float4 p = w[k];
        a[4 * k] = a[4 * k] + p.x * vals[4 * k];
        a[4 * k + 1] = a[4 * k + 1] + p.y * vals[4 * k + 1];
        a[4 * k + 2] = a[4 * k + 2] + p.z * vals[4 * k + 2];
        a[4 * k + 3] = a[4 * k + 3] + p.w * vals[4 * k + 3];
    }
}

// The value pass of a chunk's cn keys for output dimension t: ATT_GV interleaved partial sums
// (whole runs by value_run, then the guarded keys), merged by pair_tree into a[0] (`a` is
// declared here). A macro, not a function: through a function NVRTC orders the default
// kernels' float operations otherwise (bench/ptx_float_ops.py); attend_paged expands it in
// place, value_pass (a _tail kernel's tail) around it: the same statements, the same order.
#define ATT_VALUE_PASS(a, ps, vread, rows, vex, cn, t)                                       \
    float a[ATT_GV];                                                                         \
    _Pragma("unroll") for (int gg = 0; gg < ATT_GV; ++gg) a[gg] = 0.0f;                      \
    for (int jb = 0; jb < (cn); jb += ATT_GV) {                                              \
        if (jb + ATT_GV <= (cn)) { /* a whole run: the same for the whole group */          \
            value_run<KIND, D, STAGE>(a, ps, vread, rows, vex, jb, t);                       \
            continue;                                                                        \
        }                                                                                    \
        float vals[ATT_GV];                                                                  \
        _Pragma("unroll") for (int gg = 0; gg < ATT_GV; ++gg) {                              \
            const int jj = jb + gg;                                                          \
            const float ex = KIND == KIND_FP8 && jj < (cn) ? vex[jj] : 0.0f;                 \
            const long long at = (STAGE ? (long long)jj : (long long)rows[jj]) * D + t;      \
            vals[gg] = jj < (cn) ? load_code<KIND>(vread, at, ex) : 0.0f;                    \
        }                                                                                    \
        _Pragma("unroll") for (int gg = 0; gg < ATT_GV; ++gg)                                \
            if (jb + gg < (cn)) a[gg] = a[gg] + ps[jb + gg] * vals[gg];                      \
    }                                                                                        \
    pair_tree<ATT_GV / 2>(a);

template <int KIND, int D, bool STAGE>
__device__ __forceinline__ float value_pass(const float* ps, const void* vread, const int* rows,
                                            const float* vex, int cn, int t) {
    ATT_VALUE_PASS(a, ps, vread, rows, vex, cn, t)
    return a[0];
}

struct Fmax {
    __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct Fadd {
    __device__ float operator()(float a, float b) const { return __fadd_rn(a, b); }
};

// group_tree (cupy_kernels.cu) over two sets of one group's D values at once, v into red[],
// v2 into red2[]: each set the same pairs in the same order as a tree of its own (the same
// bits), the two sharing every barrier.
template <typename Op>
__device__ __forceinline__ float2 group_tree2(float* red, float* red2, int t, int D, float v,
                                              float v2, Op op) {
    if (D > 32) {
        red[t] = v;
        red2[t] = v2;
        __syncthreads();
        for (int s = D >> 1; s >= 32; s >>= 1) {
            if (t < s) {
                red[t] = op(red[t], red[t + s]);
                red2[t] = op(red2[t], red2[t + s]);
            }
            __syncthreads();
        }
    }
    if (t < 32) {
        const float x = warp_levels(D > 32 ? red[t] : v, t, D, op);
        const float x2 = warp_levels(D > 32 ? red2[t] : v2, t, D, op);
        if (t == 0) red[0] = x, red2[0] = x2;
    }
    __syncthreads();
    const float2 out = make_float2(red[0], red2[0]);
    __syncthreads();
    return out;
}
