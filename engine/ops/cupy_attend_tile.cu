// Attention over many query rows that share their keys (a prompt step, a verify step), after
// cupy_attend.cu (its helpers: group_max, group_sum, attend_finish, copy16_async, the codecs).
//
// One block of D threads per (tile of R consecutive rows, KV head): its P = R * (Hq / Hkv)
// (row, q head) pairs. For each chunk of D keys (at absolute positions, as in attend_paged),
// the block copies the chunk's K and V codes into shared memory once (cp.async) and then runs
// every pair that sees the chunk through it, one pair after another, with the split form's
// arithmetic: the pair's state for the chunk's group (c % ATT_NG: max, sum, and each thread's
// output dimension) lives in shared memory between chunks, and at the end each pair's
// ATT_NG groups merge in group order (attend_finish). So a pair gets the float operations,
// in the order, of attend_paged (either form): the same bits, whatever the tile holds.
//
// Rows of a tile need not share their keys: before a row runs a chunk, the block compares the
// chunk's key rows (slot * Hkv + head) with those staged and copies again what differs; keys
// a row needs past those staged (its last chunk) are added. Only keys up to a row's own last
// position are read through its page list.
template <int KIND, int D>
__device__ void attend_tile(const float* q, const void* kc, const void* vc,
                            const signed char* ke, const signed char* ve, const int* ptab,
                            const int* poff, const int* last_pos, float* out,
                            unsigned short* outb, int n, int hq, int hkv, int page_rows,
                            float scale, int tile_rows) {
    extern __shared__ uint4 staged[];
    constexpr int per = D / 32, nwarps = D / 32;
    constexpr int G = per <= 4 ? 2 * ATT_G : ATT_G;
    constexpr int VPR = D * code_bytes<KIND>() / 16;  // 16-byte pieces of one key's codes
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
    const int qpk = hq / hkv, kvh = blockIdx.y, r0 = blockIdx.x * tile_rows;
    const int rows_here = min(tile_rows, n - r0), pairs = rows_here * qpk;
    uint4* kst = staged;
    uint4* vst = kst + D * VPR;
    float* qs = (float*)(vst + D * VPR);  // [pairs][D]: q * scale
    float* ps = qs + tile_rows * qpk * D;
    float* red = ps + D;
    float* kex = red + D;
    float* vex = kex + D;
    int* rows = (int*)(vex + D);  // the staged keys' (slot * hkv + kv head)
    float* st_m = (float*)(rows + D);  // [pairs][ATT_NG]
    float* st_l = st_m + tile_rows * qpk * ATT_NG;
    float* st_acc = st_l + tile_rows * qpk * ATT_NG;  // [pairs][ATT_NG][D]
    int lmax = 0;
    for (int i = 0; i < rows_here; ++i) lmax = max(lmax, last_pos[r0 + i]);
    for (int p = 0; p < pairs; ++p) {
        const int r = r0 + p / qpk, h = kvh * qpk + p % qpk;
        qs[p * D + t] = q[((long long)r * hq + h) * D + t] * scale;
        if (t < ATT_NG) {
            st_m[p * ATT_NG + t] = NEG_INF;
            st_l[p * ATT_NG + t] = 0.0f;
        }
        for (int k = 0; k < ATT_NG; ++k) st_acc[(p * ATT_NG + k) * D + t] = 0.0f;
    }
    int staged_n = 0;  // keys of the current chunk in kst/vst (the same in every thread)
    for (int c = 0; c * D <= lmax; ++c) {
        const int c0 = c * D, g = c % ATT_NG, j = c0 + t;
        staged_n = 0;  // a new chunk: nothing of it is staged
        for (int i = 0; i < rows_here; ++i) {
            const int r = r0 + i, last = last_pos[r];
            if (c0 > last) continue;  // the same for the whole block
            const int cn = min(D, last - c0 + 1);
            const int* pages = ptab + poff[r];
            const int mine = t < cn ? (pages[j / page_rows] * page_rows + j % page_rows) * hkv + kvh
                                    : -1;
            const int differs = __syncthreads_or(t < min(cn, staged_n) && rows[t] != mine);
            const int from = differs ? 0 : staged_n;
            if (cn > from) {  // the same for the whole block
                if (t >= from && t < cn) {
                    rows[t] = mine;
                    if (KIND == KIND_FP8) {
                        kex[t] = (float)ke[mine];
                        vex[t] = (float)ve[mine];
                    }
                }
                __syncthreads();
                for (int e = from * VPR + t; e < cn * VPR; e += D) {
                    const int key = e / VPR;
                    const long long src = (long long)rows[key] * VPR + (e - key * VPR);
                    copy16_async(kst + e, (const uint4*)kc + src);
                    copy16_async(vst + e, (const uint4*)vc + src);
                }
                copies_done();
                __syncthreads();
                staged_n = differs ? cn : max(staged_n, cn);
            }
            for (int p = i * qpk; p < (i + 1) * qpk; ++p) {
                const int sg = p * ATT_NG + g;
                float m = st_m[sg], l = st_l[sg], acc = st_acc[sg * D + t];
                float qr[per];
#pragma unroll
                for (int u = 0; u < per; ++u) qr[u] = qs[p * D + lane * per + u];
                for (int jb = warp; jb < D && c0 + jb <= last; jb += nwarps * G) {
                    float kv[G][per];
#pragma unroll
                    for (int gg = 0; gg < G; ++gg) {
                        const int jj = jb + gg * nwarps;
                        if (jj < D && c0 + jj <= last) {
                            const long long base = (long long)jj * D + lane * per;
                            const float ex = KIND == KIND_FP8 ? kex[jj] : 0.0f;
#pragma unroll
                            for (int u = 0; u < per; ++u)
                                kv[gg][u] = load_code<KIND>(kst, base + u, ex);
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
                        const int jj = jb + gg * nwarps;
                        if (lane == 0 && jj < D) ps[jj] = part;
                    }
                }
                __syncthreads();
                const bool seen = j <= last;
                const float s = seen ? ps[t] : NEG_INF;
                const float chunk_max = group_max(red, t, D, s);
                const float m_new = fmaxf(m, chunk_max);
                const float pr = seen ? expf(s - m_new) : 0.0f;
                ps[t] = pr;
                const float psum = group_sum(red, t, D, pr);
                const float alpha = expf(m - m_new);
                float a[ATT_GV];
#pragma unroll
                for (int gg = 0; gg < ATT_GV; ++gg) a[gg] = 0.0f;
                for (int jb = 0; jb < cn; jb += ATT_GV) {
                    float vals[ATT_GV];
#pragma unroll
                    for (int gg = 0; gg < ATT_GV; ++gg) {
                        const int jj = jb + gg;
                        const float ex = KIND == KIND_FP8 && jj < cn ? vex[jj] : 0.0f;
                        vals[gg] = jj < cn ? load_code<KIND>(vst, (long long)jj * D + t, ex) : 0.0f;
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
                st_acc[sg * D + t] = acc;
                __syncthreads();  // every thread has read st_m, st_l and ps of this pass
                if (t == 0) {
                    st_m[sg] = m;
                    st_l[sg] = l;
                }
            }
        }
    }
    __syncthreads();
    for (int p = 0; p < pairs; ++p) {
        const int r = r0 + p / qpk, h = kvh * qpk + p % qpk;
        attend_finish<D>(st_m + p * ATT_NG, st_l + p * ATT_NG, st_acc + p * ATT_NG * D, t, out,
                         outb, ((long long)r * hq + h) * D);
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
#define ATTEND_TILE_KERNEL(NAME, KIND, D)                                  \
    __global__ void __launch_bounds__(D) NAME##_##D##_tile(ATTEND_TILE_ARGS) { \
        PDL_ENTRY();                                                       \
        attend_tile<KIND, D>(ATTEND_TILE_PASS);                            \
    }
#define ATTEND_TILE_KERNELS(D)                   \
    ATTEND_TILE_KERNEL(attend_f32, KIND_F32, D)   \
    ATTEND_TILE_KERNEL(attend_bf16, KIND_BF16, D) \
    ATTEND_TILE_KERNEL(attend_fp8, KIND_FP8, D)
ATTEND_TILE_KERNELS(32)
ATTEND_TILE_KERNELS(64)
ATTEND_TILE_KERNELS(128)

}  // extern "C"
