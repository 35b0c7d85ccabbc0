// Staging for the attention kernels (cupy_attend.cu, cupy_attend_tile.cu), compiled after
// cupy_kernels.cu and before them: a chunk's K and V codes copied into shared memory by
// cp.async (all of a chunk's pieces in flight at once), the bits of a split launch's `flags`,
// and the fixed-order tree over a thread's partial sums.

// The tree a[i] + a[i + W] for i < W, then W / 2, .. 1: the sum of a[0 .. 2W - 1] in a fixed
// order, into a[0]. A template per level, so every index is a constant and `a` stays in
// registers (a loop whose bound is the level's left a local array in memory: ncu read its
// loads and stores as most of the attention kernels' L2 traffic, 2026-12-07).
template <int W>
__device__ __forceinline__ void pair_tree(float* a) {
    if constexpr (W > 0) {
#pragma unroll
        for (int i = 0; i < W; ++i) a[i] = __fadd_rn(a[i], a[i + W]);
        pair_tree<W / 2>(a);
    }
}

// 16 bytes global -> shared without registers (cp.async, sm_80+); copies_done waits for them.
__device__ __forceinline__ void copy16_async(void* smem, const void* gmem) {
    const unsigned dst = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(gmem));
}

__device__ __forceinline__ void copies_sent() { asm volatile("cp.async.commit_group;\n" ::); }

// every copy the thread committed, landed
__device__ __forceinline__ void copies_waited() { asm volatile("cp.async.wait_group 0;\n" ::); }

// the thread's copies committed so far, and these, landed
__device__ __forceinline__ void copies_done() {
    copies_sent();
    copies_waited();
}

// ENGINE_ATTEND_PHASES (bench/cupy_attend_phases.py only; never in the engine's modules): each
// block's thread 0 writes into attend_phase_log[block][k] clock64() at its start (0), the end of
// its wait for the kernel before (1), its q read (12: thread 0's own load waited for), the
// chunk loop's end (5), the election (6) and its end (7); globaltimer at its start (8) and end
// (9); whether its slot 0 merged (10); how many chunk passes its group took (13); and the
// cycles each phase of a chunk pass took, summed over the passes (ATT_LAP: 2 the keys' rows
// and the copies, 3 scores, 4 the max and sum trees, 11 the value pass). Off, ATT_PHASE and
// ATT_LAP are nothing and the kernels are what they are without them.
#ifdef ENGINE_ATTEND_PHASES
#define ATT_PHASES 14
#define ATT_PHASE_BLOCKS 8192
__device__ long long attend_phase_log[ATT_PHASE_BLOCKS * ATT_PHASES];
__device__ __forceinline__ long long* att_phase_row() {
    const long long b = ((long long)blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
    return threadIdx.x == 0 && b < ATT_PHASE_BLOCKS ? attend_phase_log + b * ATT_PHASES : nullptr;
}
__device__ __forceinline__ void att_phase(int k, long long value = -1) {
    long long* row = att_phase_row();
    if (!row) return;
    long long v = value;
    if (k == 8 || k == 9) asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(v));
    else if (value < 0) v = clock64();
    row[k] = v;
}
// a chunk pass's phases: laps since the pass began (or the last lap), summed in registers
struct AttLaps {
    long long at = 0, sum[4] = {0, 0, 0, 0};
    __device__ __forceinline__ void begin() { at = clock64(); }
    __device__ __forceinline__ void lap(int k) {
        const long long now = clock64();
        sum[k] += now - at;
        at = now;
    }
    __device__ __forceinline__ void write() const {
        long long* row = att_phase_row();
        if (row) row[2] = sum[0], row[3] = sum[1], row[4] = sum[2], row[11] = sum[3];
    }
};
#define ATT_PHASE(...) att_phase(__VA_ARGS__)
#define ATT_LAPS AttLaps laps_
#define ATT_LAP(f) laps_.f
#else
#define ATT_PHASE(...)
#define ATT_LAPS
#define ATT_LAP(f)
#endif

// bits of a split launch's `flags`: early copies (options.attend_early)
#define ATT_EARLY 1
// the most keys of a group's last chunk that a _tail kernel takes beside the one before
// (cupy_attend.cu, TAIL)
#define ATT_TAILK 32

// Where a thread scores a whole key (key_score: staged split launches, the _tile_ts kernels),
// the staged K rows lie KPAD 16-byte pieces apart, so a quarter warp's reads of its keys'
// pieces fall on distinct banks (its value in cupy_attend_plan.py too).
#define KPAD 1

// bytes of one stored code: f32, bf16, fp8 (e4m3)
template <int KIND>
__host__ __device__ constexpr int code_bytes() { return KIND == KIND_F32 ? 4 : KIND == KIND_BF16 ? 2 : 1; }

// the 16-byte piece `v` of a key's codes as the DPU = 16 / code bytes values it holds (element
// i in the lowest bits first), each as load_code makes it
template <int KIND>
__device__ __forceinline__ void piece_codes(float* out, const uint4& v, float ex) {
    const unsigned w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        if (KIND == KIND_F32) {
            out[i] = __uint_as_float(w[i]);
        } else if (KIND == KIND_BF16) {
            out[2 * i] = bf16_to_f32((unsigned short)(w[i] & 0xffffu));
            out[2 * i + 1] = bf16_to_f32((unsigned short)(w[i] >> 16));
        } else {
#pragma unroll
            for (int b = 0; b < 4; ++b)
                out[4 * i + b] = ldexpf(e4m3_to_f32((unsigned char)(w[i] >> (8 * b))), (int)ex);
        }
    }
}

// Key j's score, whole in one thread, with the warp's arithmetic of attend_paged: lane l's part
// (dims l * per .. in order, each an fma, from 0) for l = 0..31, then the pairs of the shuffle
// tree (offsets 16, 8, 4, 2, 1: part[l] + part[l + off]); krow: the key's staged codes.
template <int KIND, int D>
__device__ __forceinline__ float key_score(const float* qs, const uint4* krow, float ex) {
    constexpr int per = D / 32, DPU = 16 / code_bytes<KIND>(), VPR = D / DPU;
    float part[32];
#pragma unroll
    for (int pc = 0; pc < VPR; ++pc) {
        float kv[DPU];
        piece_codes<KIND>(kv, krow[pc], ex);
#pragma unroll
        for (int u = 0; u < DPU; u += 4) {
            const float4 q4 = *(const float4*)(qs + pc * DPU + u);
            const float q[4] = {q4.x, q4.y, q4.z, q4.w};
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int d = pc * DPU + u + i, l = d / per;
                part[l] = __fmaf_rn(q[i], kv[u + i], d % per ? part[l] : 0.0f);
            }
        }
    }
    pair_tree<16>(part);
    return part[0];
}

// Key j of a chunk, read by thread t: the row of its codes (slot * hkv + kv head, through
// the page list `pages`) into rows[t], and for fp8 its K and V exponents into kex[t], vex[t].
template <int KIND>
__device__ __forceinline__ void chunk_key(const int* pages, int j, int page_rows, int hkv, int kvh,
                                          const signed char* ke, const signed char* ve, int t,
                                          int* rows, float* kex, float* vex) {
    const int row = (pages[j / page_rows] * page_rows + j % page_rows) * hkv + kvh;
    rows[t] = row;
    if (KIND == KIND_FP8) {
        kex[t] = (float)ke[row];
        vex[t] = (float)ve[row];
    }
}

// The K and V codes of a chunk's keys first .. cn - 1 (their rows in rows[]) into kst / vst
// by `threads` threads (the block's), every 16-byte piece in flight at once (cp.async), then
// (wait) waited for with any sent before; the caller's barrier makes them visible to the block.
// A key's K codes start KP pieces after the key before's (KP > VPR: rows padded).
template <int KIND, int D, int KP = D * code_bytes<KIND>() / 16>
__device__ __forceinline__ void copy_chunk(const void* kc, const void* vc, const int* rows, int cn,
                                           int threads, uint4* kst, uint4* vst, int first = 0,
                                           bool wait = true) {
    constexpr int VPR = D * code_bytes<KIND>() / 16;  // 16-byte pieces of one key's codes
    for (int e = first * VPR + threadIdx.x; e < cn * VPR; e += threads) {
        const int key = e / VPR, piece = e - key * VPR;
        const long long src = (long long)rows[key] * VPR + piece;
        copy16_async(kst + key * KP + piece, (const uint4*)kc + src);
        copy16_async(vst + e, (const uint4*)vc + src);
    }
    if (wait)
        copies_done();
    else
        copies_sent();
}
