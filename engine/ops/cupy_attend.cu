// Attention kernels of the cupy backend: compiled after cupy_kernels.cu (its helpers:
// the codecs, load_code, the trees), cupy_attend_store.cu (the FS form's),
// cupy_attend_stage.cu (copying a chunk into shared memory, pair_tree) and
// cupy_attend_parts.cu (the value pass, the merge), in one NVRTC module (cupy_modules.py).

// Causal attention of q [n, Hq, D] over keys stored in pages, one block per (row, q head) of
// ATT_NG groups of D threads (D = head_dim, a template parameter: 32, 64, 128 or 256, so the
// loops over a lane's dims unroll and a warp issues the loads of G keys before it sums any:
// the scoring waits on memory about once per G keys, not once per dim). Row r sees keys 0..last[r]
// of its stream, through its page list ptab[poff[r]..]. Keys are cut into chunks of D at
// absolute positions; chunk c belongs to group c % ATT_NG, which takes its chunks in order
// with an online softmax. Per chunk: each warp scores every nwarps-th key (each lane sums its
// D/32 adjacent dimensions in order, then a fixed shuffle tree), a tree max and a tree sum,
// then each thread accumulates its output dimension over the chunk's keys (ATT_GV
// interleaved partial sums, merged by a fixed tree). At the end the groups' (max, sum,
// output) merge in group order. Every order depends on last[r] and D alone, never on other
// rows; in this form no atomics and nothing split across blocks (SPLIT below).
//
// SPLIT: the same work with each group in its own block (blockIdx.z = g), for launches of
// few (row, head) pairs, which would leave most SMs idle; a block takes QH q heads of one KV
// head (QH D threads, slot gb = its head h = blockIdx.y * QH + gb; QH divides the q heads a
// KV head), each slot a pair's arithmetic of its own over the one chunk staged for all; a
// group writes its (max, sum, output) to part[], and the block of the pair that finishes last
// (elected by an atomic counter, count[], which no value passes through) merges the four in
// group order with the same float operations as the end of this kernel. The two forms give
// the same bits. At D <= 128
// the split form first copies a chunk's K and V codes into shared memory (cp.async, all in
// flight at once) and reads them there: the same values in the same order, one wait on
// memory a chunk instead of one per few keys. With `early` it sends the first chunk's copies
// of keys no kernel of this step writes before its wait for the kernel before (PDL_ENTRY):
// a step of n rows writes only the top n positions of a row's keys, so keys 0 .. last - n
// are older than the launch before it, whose own wait saw them done. Only when they land
// changes, not a value. A staged split launch (not FS) scores a key a thread: thread t of a
// slot scores key t of the chunk whole (key_score: the warp's arithmetic, lane parts then
// the shuffle tree's pairs), the chunk's K rows staged KPAD pieces apart.
//
// FS (split, staged): the q/k norms, RoPE and K/V write of the step (qkv_norm_rope_store's
// work) in this launch, from the qkv projection's rows `hs` (heads_in below): each slot norms
// and ropes its q head; a chunk's keys from fresh[r] on (the keys of r's stream this step
// writes, the rows before r in the launch) are made in the block, encoded into the staged
// chunk, with the same functions and trees as qkv_norm_rope_store, never read back from
// memory; and the first block of r's KV head whose group holds key last[r] writes that key's
// codes into slots[r]. The same codes, the same q, the same arithmetic after.
template <int KIND, int D, bool SPLIT, int QH = 1, bool FS = false, bool TAIL = false>
__device__ void attend_paged(const float* q, const void* kc, const void* vc,
                             const signed char* ke, const signed char* ve, const int* ptab,
                             const int* poff, const int* last_pos, float* out,
                             unsigned short* outb, int hq, int hkv, int page_rows, float scale,
                             float* part, int* count, int flags, HeadsIn hs = HeadsIn{}) {
    extern __shared__ float sh[];
    static_assert(!FS || (SPLIT && D <= 128), "the fused store needs the staged split form");
    // a merging split slot's ATT_NG outputs fill its 4 D floats of ps, red, kex, vex
    static_assert(!SPLIT || QH == 1 || ATT_NG <= 4, "split slots merge over 4 D floats");
    // slots of D threads: the pair's groups (one block per pair), or q heads (split)
    constexpr int NGB = SPLIT ? QH : ATT_NG;
    constexpr int NQ = SPLIT ? QH : 1;  // q rows held: each split slot has its own head's
    constexpr int per = D / 32, nwarps = D / 32, GD = NGB * D;
    // keys scored at once by one warp: all their loads are issued before the first sum
    constexpr int G = per <= 4 ? 2 * ATT_G : ATT_G;
    const int gb = threadIdx.x / D, t = threadIdx.x % D;  // gb: the thread's slot in this block
    const int g = SPLIT ? (int)blockIdx.z : gb;             // g: which chunks it takes
    const int lane = t & 31, warp = t >> 5;
    float* qs = sh + (SPLIT ? gb * D : 0);
    float* const slots = sh + NQ * D;  // ps, red, kex, vex, rows: D a slot each
    float* ps = slots + gb * D;
    float* red = slots + GD + gb * D;
    float* kex = slots + 2 * GD + gb * D;
    float* vex = slots + 3 * GD + gb * D;
    int* const rows0 = (int*)(slots + 4 * GD);  // slot 0's: the staging reads them
    int* rows = rows0 + gb * D;  // (slot * hkv + kv head) of the chunk's keys
    float* ms = slots + 5 * GD + (SPLIT ? gb * 2 * ATT_NG : 0);
    float* ls = ms + ATT_NG;
    // STAGE: the chunk's codes, K then V, D rows of D codes each, after the floats above
    constexpr bool STAGE = SPLIT && D <= 128;
    constexpr int VPR = D * code_bytes<KIND>() / 16;  // 16-byte pieces of one key's codes
    // with thread scores (ts) a key's K codes lie KP pieces after the key before's, else VPR
    constexpr bool ts = STAGE && !FS;
    constexpr int KP = VPR + (ts ? KPAD : 0);
    uint4* kst = (uint4*)(slots + 5 * GD + 2 * ATT_NG * NQ);
    uint4* vst = kst + D * KP;
    const void* kread = STAGE ? (const void*)kst : kc;
    const void* vread = STAGE ? (const void*)vst : vc;
    // TAIL (the _tail kernels, their launch's shared memory sized for it: cupy_attend_plan):
    // the group's last chunk, if it has at most ATT_TAILK keys, staged after vst and taken in
    // the turn before it, beside that turn's chunk
    static_assert(!TAIL || ts, "a tail is staged and scored a key a thread");
    uint4* const kst_t = vst + D * VPR;
    uint4* const vst_t = kst_t + ATT_TAILK * KP;
    float* const tail_f = (float*)(vst_t + ATT_TAILK * VPR);
    float* pt = tail_f + gb * ATT_TAILK;  // the tail's scores, then weights
    float* red2 = tail_f + NQ * ATT_TAILK + gb * D;
    float* const kex_t = tail_f + NQ * (ATT_TAILK + D);  // one set for all slots
    float* const vex_t = kex_t + ATT_TAILK;
    int* const rows_t = (int*)(vex_t + ATT_TAILK);
    const int r = blockIdx.x, h = SPLIT ? blockIdx.y * QH + gb : blockIdx.y, kvh = h / (hq / hkv);
    const bool early = flags & ATT_EARLY;
    ATT_PHASE(8);
    ATT_PHASE(0);
    if (!(STAGE && early)) {
        PDL_ENTRY();
        ATT_PHASE(1);
    }
    const int* pages = ptab + poff[r];  // the step's inputs: no kernel writes them
    const int last = last_pos[r];
    // keys before `fresh` are older than this step: with FS exactly (keys fresh .. last are
    // made here), else a bound (the step's n rows write at most a row's top n positions)
    const int fresh = FS ? hs.fresh[r] : max(0, last - (int)gridDim.x + 1);
    int sent = 0;  // keys of the first chunk whose copies went before the wait
    if (STAGE && early) {  // the same for the whole block
        const int c0 = g * D;
        sent = max(0, min(D, fresh - c0));  // keys c0 .. fresh - 1
        if (sent) {
            if (t < sent) chunk_key<KIND>(pages, c0 + t, page_rows, hkv, kvh, ke, ve, t, rows, kex, vex);
            __syncthreads();
            copy_chunk<KIND, D, KP>(kc, vc, rows0, sent, QH * D, kst, vst, 0, false);
        }
        PDL_ENTRY();
        ATT_PHASE(1);
        __syncthreads();  // rows0 is read by those copies before the loop writes it again
    }
    if (FS) {
        auto slot_sum = [red, t](float v) { return group_sum(red, t, D, v); };
        const float x = hs.qkv[r * hs.stride + (long long)h * D + t];
        qs[t] = norm_rope_at(x, hs.qw, hs.cos_t, hs.sin_t, r, hs.eps, ps, t, D, slot_sum) * scale;
    } else if (SPLIT || gb == 0) {
        qs[t] = q[((long long)r * hq + h) * D + t] * scale;
    }
    ATT_PHASE(12);
    float m = NEG_INF, l = 0.0f, acc = 0.0f;
    ATT_LAPS;
    const int nchunks = last / D + 1;
    // a split block (one group, g the same for all its threads) stops after its group's last
    // chunk; the pair form's groups share the block's barriers, so each runs every turn (a
    // turn past a group's chunks changes none of its m, l, acc)
    const int live_turns = max(0, (nchunks - g + ATT_NG - 1) / ATT_NG);  // with a chunk of g's
    const int tail_c0 = ((live_turns - 1) * ATT_NG + g) * D, cn_t = last - tail_c0 + 1;
    const bool tail = TAIL && live_turns >= 2 && cn_t <= ATT_TAILK;
    const int turns = SPLIT ? live_turns - tail : (nchunks + ATT_NG - 1) / ATT_NG;
    for (int it = 0; it < turns; ++it) {
        ATT_LAP(begin());
        const int c0 = (it * ATT_NG + g) * D;
        const bool live = c0 <= last;  // the same for the whole group
        const bool with_tail = tail && it == turns - 1;  // and so live
        const int j = c0 + t;
        // FS: keys from fresh on are made below (their exponents too), never read: another
        // block may be writing them
        if (live && j <= last && (!FS || j < fresh))
            chunk_key<KIND>(pages, j, page_rows, hkv, kvh, ke, ve, t, rows, kex, vex);
        if (with_tail && gb == 0 && t < cn_t)
            chunk_key<KIND>(pages, tail_c0 + t, page_rows, hkv, kvh, ke, ve, t, rows_t, kex_t, vex_t);
        __syncthreads();
        if (STAGE && live) {  // the same for the whole block: its barrier is block-wide
            const int cn = min(D, last - c0 + 1);
            if (with_tail)  // in flight with the chunk's, waited for with them
                copy_chunk<KIND, D, KP>(kc, vc, rows_t, cn_t, QH * D, kst_t, vst_t, 0, false);
            copy_chunk<KIND, D, KP>(kc, vc, rows0, FS ? min(cn, max(0, fresh - c0)) : cn, QH * D,
                                    kst, vst, it ? 0 : sent);
            __syncthreads();
            if (FS) {
                make_keys<KIND, D>(hs, r, c0, fresh, last, kvh, hq, hkv, t, gb == 0,
                                   blockIdx.y * QH == kvh * (hq / hkv), kc, vc, ke, ve, kst, vst,
                                   kex, vex, red, ps);
                __syncthreads();
            }
        }
        ATT_LAP(lap(0));
        if (ts && live) {  // key t of the chunk whole in thread t (its slot's head)
            if (c0 + t <= last)
                ps[t] = key_score<KIND, D>(qs, kst + t * KP, KIND == KIND_FP8 ? kex[t] : 0.0f);
            if (with_tail && t < cn_t)
                pt[t] = key_score<KIND, D>(qs, kst_t + t * KP, KIND == KIND_FP8 ? kex_t[t] : 0.0f);
        } else if (live) {
            float qr[per];
#pragma unroll
            for (int i = 0; i < per; ++i) qr[i] = qs[lane * per + i];
            for (int jb = warp; jb < D && c0 + jb <= last; jb += nwarps * G) {
                float kv[G][per];
#pragma unroll
                for (int gg = 0; gg < G; ++gg) {
                    const int jj = jb + gg * nwarps;
                    if (jj < D && c0 + jj <= last) {
                        const long long base = (STAGE ? (long long)jj : (long long)rows[jj]) * D
                                               + lane * per;
                        const float ex = KIND == KIND_FP8 ? kex[jj] : 0.0f;
#pragma unroll
                        for (int i = 0; i < per; ++i)
                            kv[gg][i] = load_code<KIND>(kread, base + i, ex);
                    } else {
#pragma unroll
                        for (int i = 0; i < per; ++i) kv[gg][i] = 0.0f;
                    }
                }
#pragma unroll
                for (int gg = 0; gg < G; ++gg) {
                    float part = 0.0f;  // this lane's dims in order, then a fixed shuffle tree
#pragma unroll
                    for (int i = 0; i < per; ++i) part = part + qr[i] * kv[gg][i];
#pragma unroll
                    for (int off = 16; off > 0; off >>= 1)
                        part = part + __shfl_down_sync(0xffffffffu, part, off);
                    const int jj = jb + gg * nwarps;
                    if (lane == 0 && jj < D) ps[jj] = part;
                }
            }
        }
        __syncthreads();
        ATT_LAP(lap(1));
        const bool seen = live && j <= last;
        const float s = seen ? ps[t] : NEG_INF;
        // with_tail: the tail's values (keys tail_c0 + t) through trees of their own, beside
        // the chunk's; every group joins the barriers
        const float st = with_tail && t < cn_t ? pt[t] : NEG_INF;
        float chunk_max, tail_max = NEG_INF;
        if (with_tail) {
            const float2 both = group_tree2(red, red2, t, D, s, st, Fmax{});
            chunk_max = both.x, tail_max = both.y;
        } else {
            chunk_max = group_max(red, t, D, s);
        }
        const float m_new = live ? fmaxf(m, chunk_max) : m;
        const float p = seen ? expf(s - m_new) : 0.0f;
        ps[t] = p;
        float m_t = 0.0f, p_t = 0.0f, psum, tail_sum = 0.0f;  // m after the tail
        if (with_tail) {
            m_t = fmaxf(m_new, tail_max);
            p_t = t < cn_t ? expf(st - m_t) : 0.0f;
            if (t < ATT_TAILK) pt[t] = p_t;
            const float2 both = group_tree2(red, red2, t, D, p, p_t, Fadd{});
            psum = both.x, tail_sum = both.y;
        } else {
            psum = group_sum(red, t, D, p);  // its barriers order ps[] for the reads below
        }
        ATT_LAP(lap(2));
        if (live) {
            const float alpha = expf(m - m_new);  // 0 on the group's first chunk
            const int cn = min(D, last - c0 + 1);
            ATT_VALUE_PASS(a, ps, vread, rows, vex, cn, t)
            l = l * alpha + psum;
            acc = acc * alpha + a[0];
            m = m_new;
        }
        if (with_tail) {  // the tail's turn, as it would have run after this one
            const float alpha = expf(m - m_t);
            const float a = value_pass<KIND, D, STAGE>(pt, vst_t, rows_t, vex_t, cn_t, t);
            l = l * alpha + tail_sum;
            acc = acc * alpha + a;
            m = m_t;
        }
        __syncthreads();
        ATT_LAP(lap(3));
    }
    ATT_LAP(write());
    ATT_PHASE(5);
    ATT_PHASE(13, (long long)(live_turns - tail));  // the passes it ran
    if (SPLIT) {  // part[(r, h)]: ATT_NG maxima, ATT_NG sums, then ATT_NG outputs of D
        float* p = part + ((long long)r * hq + h) * ATT_NG * (D + 2);
        if (t == 0) {
            p[g] = m;
            p[ATT_NG + g] = l;
        }
        p[2 * ATT_NG + g * D + t] = acc;
        // The block that finishes last among the (row, head)'s ATT_NG merges them: the
        // counter only elects it (its parts are read in group order whichever block it is),
        // and it sets the counter back to 0 for the next launch.
        __threadfence();
        __syncthreads();
        int* elected = rows;  // each slot's own: its head's last block may be another
        if (t == 0) elected[0] = atomicAdd(count + (long long)r * hq + h, 1) == ATT_NG - 1;
        __syncthreads();
        const bool merge = elected[0] != 0;
        ATT_PHASE(6);
        ATT_PHASE(10, merge);
        // a merging slot's ATT_NG outputs over ps, red, kex, vex (4 D floats a slot, no
        // longer read by any slot); every thread reaches the barrier below
        float* accs = slots + gb * ATT_NG * D;
        if (merge) {
            __threadfence();
            if (t < ATT_NG) {
                ms[t] = __ldcg(p + t);
                ls[t] = __ldcg(p + ATT_NG + t);
            }
            for (int k = 0; k < ATT_NG; ++k) accs[k * D + t] = __ldcg(p + 2 * ATT_NG + k * D + t);
        }
        __syncthreads();
        if (merge) {
            attend_finish<D>(ms, ls, accs, t, out, outb, ((long long)r * hq + h) * D);
            if (t == 0) count[(long long)r * hq + h] = 0;
        }
        ATT_PHASE(7);
        ATT_PHASE(9);
        return;
    }
    if (t == 0) {
        ms[g] = m;
        ls[g] = l;
    }
    sh[D + g * D + t] = acc;  // the groups' outputs, over their ps[] (no longer read)
    __syncthreads();
    if (g == 0) attend_finish<D>(ms, ls, sh + D, t, out, outb, ((long long)r * hq + h) * D);
    ATT_PHASE(7);
    ATT_PHASE(9);
}


extern "C" {

#define ATTEND_ARGS                                                                    \
    const float *q, const void *kc, const void *vc, const signed char *ke,             \
        const signed char *ve, const int *ptab, const int *poff, const int *last_pos,  \
        float *out, unsigned short *outb, int hq, int hkv, int page_rows, float scale, \
        float *part, int *count, int flags
#define ATTEND_PASS                                                                     \
    q, kc, vc, ke, ve, ptab, poff, last_pos, out, outb, hq, hkv, page_rows, scale, part, count, \
        flags
// per code kind and head_dim (32, 64, 128, 256): attend_<kind>_<D> (one block per row and
// head) and attend_<kind>_<D>_split (one per row, head and group; the last group's block
// to finish merges)
// (launch bounds: at D = 256 a block has 1024 threads, which caps a thread at 64 registers)
// attend_<kind>_<D>_split<QH> (D <= 128): a split block of QH q heads of one KV head
#define SPLIT_HEADS(NAME, KIND, D, QH)                                                     \
    __global__ void __launch_bounds__(QH * D) NAME##_##D##_split##QH(ATTEND_ARGS) {          \
        attend_paged<KIND, D, true, QH>(ATTEND_PASS);                                      \
    }
#define ATTEND_KERNEL(NAME, KIND, D)                                          \
    __global__ void __launch_bounds__(ATT_NG * D) NAME##_##D(ATTEND_ARGS) {      \
        attend_paged<KIND, D, false>(ATTEND_PASS);                            \
    }                                                                         \
    __global__ void __launch_bounds__(D) NAME##_##D##_split(ATTEND_ARGS) {       \
        attend_paged<KIND, D, true>(ATTEND_PASS);                             \
    }
// attend_<kind>_<D>_split[<QH>]_fs (D <= 128): the split forms with the step's q/k norms,
// RoPE and K/V write (FS above) from the qkv rows
#define FS_ARGS                                                                          \
    ATTEND_ARGS, const float *qkv, long long stride, const float *qw, const float *kw,  \
        const float *cos_t, const float *sin_t, float eps, const long long *slots,      \
        const int *fresh
#define FS_PASS ATTEND_PASS, HeadsIn{qkv, stride, qw, kw, cos_t, sin_t, eps, slots, fresh}
#define SPLIT_FS(NAME, KIND, D, QH, SUFFIX)                                             \
    __global__ void __launch_bounds__(QH * D) NAME##_##D##SUFFIX(FS_ARGS) {             \
        attend_paged<KIND, D, true, QH, true>(FS_PASS);                                 \
    }
#define ATTEND_FS_KIND(NAME, KIND, D)                                                   \
    SPLIT_FS(NAME, KIND, D, 1, _split_fs)                                               \
    SPLIT_FS(NAME, KIND, D, 2, _split2_fs) SPLIT_FS(NAME, KIND, D, 4, _split4_fs)
#define ATTEND_FS(D)                                                                    \
    ATTEND_FS_KIND(attend_f32, KIND_F32, D)                                             \
    ATTEND_FS_KIND(attend_bf16, KIND_BF16, D) ATTEND_FS_KIND(attend_fp8, KIND_FP8, D)
#define ATTEND_KERNELS(D)                   \
    ATTEND_KERNEL(attend_f32, KIND_F32, D)   \
    ATTEND_KERNEL(attend_bf16, KIND_BF16, D) \
    ATTEND_KERNEL(attend_fp8, KIND_FP8, D)
#define ATTEND_SPLIT_HEADS(D)                                                        \
    SPLIT_HEADS(attend_f32, KIND_F32, D, 2) SPLIT_HEADS(attend_f32, KIND_F32, D, 4)     \
    SPLIT_HEADS(attend_bf16, KIND_BF16, D, 2) SPLIT_HEADS(attend_bf16, KIND_BF16, D, 4) \
    SPLIT_HEADS(attend_fp8, KIND_FP8, D, 2) SPLIT_HEADS(attend_fp8, KIND_FP8, D, 4)
// attend_<kind>_<D>_split[<QH>]_tail (D <= 128): the staged split forms that take a group's
// short last chunk beside the one before (TAIL above)
#define SPLIT_TAIL(NAME, KIND, D, QH, SUFFIX)                                           \
    __global__ void __launch_bounds__(QH * D) NAME##_##D##SUFFIX(ATTEND_ARGS) {         \
        attend_paged<KIND, D, true, QH, false, true>(ATTEND_PASS);                      \
    }
#define ATTEND_TAIL_KIND(NAME, KIND, D)                                                 \
    SPLIT_TAIL(NAME, KIND, D, 1, _split_tail)                                           \
    SPLIT_TAIL(NAME, KIND, D, 2, _split2_tail) SPLIT_TAIL(NAME, KIND, D, 4, _split4_tail)
#define ATTEND_TAIL(D)                                                                  \
    ATTEND_TAIL_KIND(attend_f32, KIND_F32, D)                                           \
    ATTEND_TAIL_KIND(attend_bf16, KIND_BF16, D) ATTEND_TAIL_KIND(attend_fp8, KIND_FP8, D)
// the FS and tail kernels only in modules of their own (-DENGINE_ATTEND_FS,
// -DENGINE_ATTEND_TAIL: CupyOps with attend_store, attend_tail): opt-in, they cost every
// other user no compile time
#if defined(ENGINE_ATTEND_TAIL)
ATTEND_TAIL(32)
ATTEND_TAIL(64)
ATTEND_TAIL(128)
#elif !defined(ENGINE_ATTEND_FS)
ATTEND_KERNELS(32)
ATTEND_KERNELS(64)
ATTEND_KERNELS(128)
ATTEND_KERNELS(256)
ATTEND_SPLIT_HEADS(32)
ATTEND_SPLIT_HEADS(64)
ATTEND_SPLIT_HEADS(128)
#else
ATTEND_FS(32)
ATTEND_FS(64)
ATTEND_FS(128)
#endif

}  // extern "C"
