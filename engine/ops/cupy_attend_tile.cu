// Attention over many query rows that share their keys (a prompt step, a verify step), after
// cupy_attend.cu (attend_finish), cupy_attend_stage.cu (chunk_key, copy_chunk, pair_tree,
// key_score, KPAD) and cupy_kernels.cu (the codecs).
//
// One block of TILE_WARPS warps per (KV head, tile of rows), the last tile first: its (row, q
// head) pairs. For each chunk of D keys (at absolute positions, as in attend_paged) the block
// copies the chunk's K and V codes into shared memory once (cp.async); then each warp runs
// pairs that see the chunk through it, a warp a pair. A warp does a pair's chunk with the
// arithmetic of attend_paged's group for that chunk (c % ATT_NG):
//   * each key's score: the lane's D/32 adjacent dimensions in order, then the shuffle tree;
//   * the chunk's max (a max: any order gives it) and exp;
//   * the sum of the chunk's D weights by attend_paged's tree (red[t] + red[t + s] for
//     s = D/2 .. 1): its levels of stride >= 32 within each lane's elements t = lane + 32 i,
//     the rest as a shuffle tree with the same pairs;
//   * each output dimension over the chunk's keys in ATT_GV interleaved partial sums, then
//     their fixed tree; l and acc rescaled as there.
// (Codes come from shared memory a word at a time: a lane's D/32 dimensions of a key when
// scoring, two adjacent output dimensions of a key in the value pass; the same values.)
// A pair's state per group (max, sum, its D outputs) waits in shared memory between chunks,
// and its ATT_NG groups merge in group order (attend_finish). So every pair gets the float
// operations, in the order, of attend_paged (either form): the same bits whatever the tile
// holds.
//
// Rows of a tile need not share their keys. The block stages the chunk through the page list
// of the tile's row that sees the most keys (ref) and runs the rows whose pages for the keys
// they see are ref's; any other row then runs alone, its keys staged through its own list.
// Only pages a row's own keys lie in are read through its list.
#define TILE_WARPS 8

// N consecutive codes from element i (a multiple of N) of 16-byte aligned codes, as floats: one
// shared-memory load, each value as load_code makes it
template <int KIND, int N>
__device__ __forceinline__ void load_codes(float* out, const void* codes, long long i, float ex) {
    if (KIND == KIND_F32) {
        if (N == 4) {
            const float4 v = ((const float4*)codes)[i / 4];
            out[0] = v.x, out[1] = v.y, out[2] = v.z, out[3] = v.w;
        } else if (N == 2) {
            const float2 v = ((const float2*)codes)[i / 2];
            out[0] = v.x, out[1] = v.y;
        } else {
            out[0] = ((const float*)codes)[i];
        }
        return;
    }
    // bf16: 2-byte codes, fp8: 1-byte; element i is the lowest bits of the word read
    constexpr int bits = KIND == KIND_BF16 ? 16 : 8;
    unsigned long long w;
    if (N * bits == 64) w = ((const unsigned long long*)codes)[i / N];
    else if (N * bits == 32) w = ((const unsigned int*)codes)[i / N];
    else if (N * bits == 16) w = ((const unsigned short*)codes)[i / N];
    else w = ((const unsigned char*)codes)[i];
#pragma unroll
    for (int u = 0; u < N; ++u) {
        const unsigned c = (unsigned)(w >> (bits * u)) & ((1u << bits) - 1u);
        out[u] = KIND == KIND_BF16 ? bf16_to_f32((unsigned short)c)
                                   : ldexpf(e4m3_to_f32((unsigned char)c), (int)ex);
    }
}

// the chunk's scores by the whole warp (attend_paged's form): each key's lane parts (the lane's
// D/32 adjacent dimensions in order), then the shuffle tree; lane 0 writes ps[j]
template <int KIND, int D>
__device__ __forceinline__ void warp_scores(const float* qs, const uint4* kst, const float* kex,
                                            float* ps, int cn) {
    constexpr int per = D / 32;
    const int lane = threadIdx.x & 31;
    float qr[per];
#pragma unroll
    for (int u = 0; u < per; ++u) qr[u] = qs[lane * per + u];
    constexpr int G = per <= 4 ? 2 * ATT_G : ATT_G;
    for (int jb = 0; jb < cn; jb += G) {
        float kv[G][per];
#pragma unroll
        for (int gg = 0; gg < G; ++gg) {
            const int jj = jb + gg;
            const float ex = KIND == KIND_FP8 && jj < cn ? kex[jj] : 0.0f;
            if (jj < cn) {
                load_codes<KIND, per>(kv[gg], kst, (long long)jj * D + lane * per, ex);
            } else {
#pragma unroll
                for (int u = 0; u < per; ++u) kv[gg][u] = 0.0f;
            }
        }
#pragma unroll
        for (int gg = 0; gg < G; ++gg) {
            float part = 0.0f;
#pragma unroll
            for (int u = 0; u < per; ++u) part = part + qr[u] * kv[gg][u];
#pragma unroll
            for (int off = 16; off > 0; off >>= 1)
                part = part + __shfl_down_sync(0xffffffffu, part, off);
            if (lane == 0 && jb + gg < cn) ps[jb + gg] = part;
        }
    }
}

// the pair's chunk by one warp (see the top); s_m, s_l, s_acc: its group's state. TS: each
// lane scores keys lane, lane + 32, .. whole (key_score; K rows staged KP pieces apart, KP =
// VPR + KPAD); else the warp scores each key, a lane's dims then the shuffle tree
template <int KIND, int D, bool TS>
__device__ __forceinline__ void tile_pair_chunk(const float* qs, const uint4* kst, const uint4* vst,
                                                const float* kex, const float* vex, float* ps,
                                                int c0, int last, float* s_m, float* s_l,
                                                float* s_acc) {
    constexpr int per = D / 32;
    const int lane = threadIdx.x & 31;
    const int cn = min(D, last - c0 + 1);
    if constexpr (TS) {
        constexpr int KP = D * code_bytes<KIND>() / 16 + KPAD;
        for (int j = lane; j < cn; j += 32)
            ps[j] = key_score<KIND, D>(qs, kst + j * KP, KIND == KIND_FP8 ? kex[j] : 0.0f);
    } else {
        warp_scores<KIND, D>(qs, kst, kex, ps, cn);
    }
    __syncwarp();
    float e[per];
    bool seen[per];
    float chunk_max = NEG_INF;
#pragma unroll
    for (int i = 0; i < per; ++i) {
        const int t = lane + 32 * i;
        seen[i] = c0 + t <= last;
        e[i] = seen[i] ? ps[t] : NEG_INF;
        chunk_max = fmaxf(chunk_max, e[i]);
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
        chunk_max = fmaxf(chunk_max, __shfl_xor_sync(0xffffffffu, chunk_max, off));
    const float m = *s_m;
    const float m_new = fmaxf(m, chunk_max);
#pragma unroll
    for (int i = 0; i < per; ++i) {
        e[i] = seen[i] ? expf(e[i] - m_new) : 0.0f;
        ps[lane + 32 * i] = e[i];
    }
    // __fadd_rn: the weights come straight from expf here (through shared memory in
    // attend_paged), so no compiler may fuse expf's last multiply into these adds
    pair_tree<per / 2>(e);  // tree levels of stride 32 k
    float psum = e[0];
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
        psum = __fadd_rn(psum, __shfl_down_sync(0xffffffffu, psum, off));
    psum = __shfl_sync(0xffffffffu, psum, 0);
    const float alpha = expf(m - m_new);
    __syncwarp();
    constexpr int VD = D >= 64 ? 2 : 1;  // adjacent output dimensions a lane takes a pass
#pragma unroll
    for (int u = 0; u < D / (32 * VD); ++u) {
        const int t0 = VD * lane + 32 * VD * u;
        float a[VD][ATT_GV];
#pragma unroll
        for (int dd = 0; dd < VD; ++dd)
#pragma unroll
            for (int gg = 0; gg < ATT_GV; ++gg) a[dd][gg] = 0.0f;
        for (int jb = 0; jb < cn; jb += ATT_GV) {
            float w[ATT_GV];  // the keys' weights (past cn: never used)
#pragma unroll
            for (int gg = 0; gg < ATT_GV; gg += 4) {
                const float4 w4 = *(const float4*)(ps + jb + gg);
                w[gg] = w4.x, w[gg + 1] = w4.y, w[gg + 2] = w4.z, w[gg + 3] = w4.w;
            }
#pragma unroll
            for (int gg = 0; gg < ATT_GV; ++gg) {
                const int jj = jb + gg;
                if (jj < cn) {
                    float v[VD];
                    const float ex = KIND == KIND_FP8 ? vex[jj] : 0.0f;
                    load_codes<KIND, VD>(v, vst, (long long)jj * D + t0, ex);
#pragma unroll
                    for (int dd = 0; dd < VD; ++dd) a[dd][gg] = a[dd][gg] + w[gg] * v[dd];
                }
            }
        }
#pragma unroll
        for (int dd = 0; dd < VD; ++dd) {
            pair_tree<ATT_GV / 2>(a[dd]);
            s_acc[t0 + dd] = s_acc[t0 + dd] * alpha + a[dd][0];
        }
    }
    __syncwarp();
    if (lane == 0) {
        *s_l = *s_l * alpha + psum;
        *s_m = m_new;
    }
    __syncwarp();
}

// whether row r's pages for keys c0 .. c0 + cn - 1 are ref's (one warp; ref sees them all)
__device__ __forceinline__ bool same_pages(const int* ptab, int off_r, int off_ref, int c0,
                                           int cn, int page_rows) {
    const int p0 = c0 / page_rows, p1 = (c0 + cn - 1) / page_rows;
    bool same = true;
    for (int p = p0 + (threadIdx.x & 31); p <= p1; p += 32)
        same = same && ptab[off_r + p] == ptab[off_ref + p];
    return __all_sync(0xffffffffu, same);
}

// the chunk's keys 0 .. cn - 1 through the page list at `pages` into kst / vst (and fp8
// exponents); block-wide
template <int KIND, int D, int KP>
__device__ __forceinline__ void stage_chunk(const void* kc, const void* vc, const signed char* ke,
                                            const signed char* ve, const int* pages, int c0, int cn,
                                            int hkv, int kvh, int page_rows, int* rows,
                                            uint4* kst, uint4* vst, float* kex, float* vex) {
    const int t = threadIdx.x;
    __syncthreads();  // every warp is done with the codes staged before
    if (t < cn) chunk_key<KIND>(pages, c0 + t, page_rows, hkv, kvh, ke, ve, t, rows, kex, vex);
    __syncthreads();
    copy_chunk<KIND, D, KP>(kc, vc, rows, cn, blockDim.x, kst, vst);
    __syncthreads();
}

template <int KIND, int D, bool TS>
__device__ void attend_tile(const float* q, const void* kc, const void* vc,
                            const signed char* ke, const signed char* ve, const int* ptab,
                            const int* poff, const int* last_pos, float* out,
                            unsigned short* outb, int n, int hq, int hkv, int page_rows,
                            float scale, int tile_rows) {
    extern __shared__ uint4 staged[];
    constexpr int VPR = D * code_bytes<KIND>() / 16, KP = VPR + (TS ? KPAD : 0);
    const int t = threadIdx.x, warp = t >> 5;
    // blockIdx.x: the KV head; tiles from the last (in a prompt step the rows that see the
    // most keys) to the first, so the longest blocks start first and short ones fill the tail
    const int qpk = hq / hkv, kvh = blockIdx.x, r0 = (gridDim.y - 1 - blockIdx.y) * tile_rows;
    const int rows_here = min(tile_rows, n - r0), pairs = rows_here * qpk;
    const int cap = tile_rows * qpk;  // pairs the shared memory is laid out for
    uint4* kst = staged;  // key j's K codes at kst + j KP
    uint4* vst = kst + D * KP;
    float* qs = (float*)(vst + D * VPR);  // [pair][D]: q * scale
    float* ps = qs + cap * D;             // [warp][D]: a warp's scores, then weights
    float* kex = ps + TILE_WARPS * D;
    float* vex = kex + D;
    float* st_m = vex + D;  // [pair][ATT_NG]
    float* st_l = st_m + cap * ATT_NG;
    float* st_acc = st_l + cap * ATT_NG;  // [pair][ATT_NG][D]
    int* rows = (int*)(st_acc + cap * ATT_NG * D);  // the staged keys' (slot * hkv + kv head)
    int* joins = rows + D;                           // [row]: runs with ref's staging
    for (int e = t; e < pairs * D; e += blockDim.x) {
        const int p = e / D, d = e % D;
        const int r = r0 + p / qpk, h = kvh * qpk + p % qpk;
        qs[e] = q[((long long)r * hq + h) * D + d] * scale;
    }
    for (int e = t; e < pairs * ATT_NG; e += blockDim.x) {
        st_m[e] = NEG_INF;
        st_l[e] = 0.0f;
    }
    for (int e = t; e < pairs * ATT_NG * D; e += blockDim.x) st_acc[e] = 0.0f;
    int ref = 0;  // the row that sees the most keys (the first such)
    for (int i = 1; i < rows_here; ++i)
        if (last_pos[r0 + i] > last_pos[r0 + ref]) ref = i;
    const int lmax = last_pos[r0 + ref], off_ref = poff[r0 + ref];
    for (int c = 0; c * D <= lmax; ++c) {
        const int c0 = c * D, g = c % ATT_NG;
        __syncthreads();  // every warp has read joins[] of the chunk before
        for (int i = warp; i < rows_here; i += TILE_WARPS) {
            const int last = last_pos[r0 + i];
            const bool join = c0 <= last && same_pages(ptab, poff[r0 + i], off_ref, c0,
                                                       min(D, last - c0 + 1), page_rows);
            if ((t & 31) == 0) joins[i] = join;
        }
        stage_chunk<KIND, D, KP>(kc, vc, ke, ve, ptab + off_ref, c0, min(D, lmax - c0 + 1), hkv,
                             kvh, page_rows, rows, kst, vst, kex, vex);
        for (int p = warp; p < pairs; p += TILE_WARPS) {
            const int i = p / qpk, sg = p * ATT_NG + g;
            if (joins[i])
                tile_pair_chunk<KIND, D, TS>(qs + p * D, kst, vst, kex, vex, ps + warp * D, c0,
                                         last_pos[r0 + i], st_m + sg, st_l + sg,
                                         st_acc + sg * D);
        }
        for (int i = 0; i < rows_here; ++i) {  // rows on other pages: each alone
            const int last = last_pos[r0 + i];
            if (joins[i] || c0 > last) continue;  // the same for the whole block
            stage_chunk<KIND, D, KP>(kc, vc, ke, ve, ptab + poff[r0 + i], c0, min(D, last - c0 + 1),
                                 hkv, kvh, page_rows, rows, kst, vst, kex, vex);
            for (int p = i * qpk + warp; p < (i + 1) * qpk; p += TILE_WARPS) {
                const int sg = p * ATT_NG + g;
                tile_pair_chunk<KIND, D, TS>(qs + p * D, kst, vst, kex, vex, ps + warp * D, c0, last,
                                         st_m + sg, st_l + sg, st_acc + sg * D);
            }
        }
    }
    __syncthreads();
    for (int p = warp; p < pairs; p += TILE_WARPS) {
        const int r = r0 + p / qpk, h = kvh * qpk + p % qpk;
        const long long at = ((long long)r * hq + h) * D;
        for (int d = t & 31; d < D; d += 32)
            attend_finish<D>(st_m + p * ATT_NG, st_l + p * ATT_NG, st_acc + p * ATT_NG * D, d,
                             out, outb, at);
    }
}

extern "C" {

#define ATTEND_TILE_ARGS                                                               \
    const float *q, const void *kc, const void *vc, const signed char *ke,             \
        const signed char *ve, const int *ptab, const int *poff, const int *last_pos,  \
        float *out, unsigned short *outb, int n, int hq, int hkv, int page_rows,        \
        float scale, int tile_rows
#define ATTEND_TILE_PASS \
    q, kc, vc, ke, ve, ptab, poff, last_pos, out, outb, n, hq, hkv, page_rows, scale, tile_rows
// attend_<kind>_<D>_tile, D <= 128 (a chunk's K and V codes staged in shared memory)
// attend_<kind>_<D>_tile_ts: the scores a key a thread (TS)
#define ATTEND_TILE_KERNEL(NAME, KIND, D)                                                  \
    __global__ void __launch_bounds__(32 * TILE_WARPS) NAME##_##D##_tile(ATTEND_TILE_ARGS) {    \
        PDL_ENTRY();                                                                       \
        attend_tile<KIND, D, false>(ATTEND_TILE_PASS);                                     \
    }                                                                                      \
    __global__ void __launch_bounds__(32 * TILE_WARPS) NAME##_##D##_tile_ts(ATTEND_TILE_ARGS) { \
        PDL_ENTRY();                                                                       \
        attend_tile<KIND, D, true>(ATTEND_TILE_PASS);                                      \
    }
#define ATTEND_TILE_KERNELS(D)                   \
    ATTEND_TILE_KERNEL(attend_f32, KIND_F32, D)   \
    ATTEND_TILE_KERNEL(attend_bf16, KIND_BF16, D) \
    ATTEND_TILE_KERNEL(attend_fp8, KIND_FP8, D)
ATTEND_TILE_KERNELS(32)
ATTEND_TILE_KERNELS(64)
ATTEND_TILE_KERNELS(128)

}  // extern "C"
