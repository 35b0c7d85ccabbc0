// The FS form of the split attention (cupy_attend.cu): the q/k norms, RoPE and K/V write of a
// step made in the attention's launch. Compiled after cupy_kernels.cu (norm_rope_at,
// encode_value, the group trees), before cupy_attend.cu.

// The qkv projection's rows and what qkv_norm_rope_store would take with them; fresh[r]: the
// first position row r's step writes (its stream's rows are the launch's rows before r).
struct HeadsIn {
    const float* qkv;
    long long stride;
    const float *qw, *kw, *cos_t, *sin_t;
    float eps;
    const long long* slots;
    const int* fresh;
};

// one code of any kind, as encode_value writes it
union Code {
    float f;
    unsigned short h;
    unsigned char b;
};

template <int KIND>
__device__ __forceinline__ void put_code(void* codes, long long i, const Code& c) {
    if (KIND == KIND_F32)
        ((float*)codes)[i] = c.f;
    else if (KIND == KIND_BF16)
        ((unsigned short*)codes)[i] = c.h;
    else
        ((unsigned char*)codes)[i] = c.b;
}

// FS: keys max(fresh, c0) .. min(last, c0 + D - 1) of a chunk made from the qkv rows that
// write them (key j: the launch's row r - (last - j)) by a slot of D threads: k normed and
// roped, k and v encoded into the staged chunk (`stager`: one slot of the block) and their fp8
// exponents into the slot's kex / vex; key last[r] also into slots[r] (`writer`: the first
// block of the KV head). Every slot calls it (its trees' barriers are the block's).
template <int KIND, int D>
__device__ __forceinline__ void make_keys(const HeadsIn& hs, int r, int c0, int fresh, int last,
                                          int kvh, int hq, int hkv, int t, bool stager,
                                          bool writer, const void* kc, const void* vc,
                                          const signed char* ke, const signed char* ve,
                                          uint4* kst, uint4* vst, float* kex, float* vex,
                                          float* red, float* nrm) {
    auto slot_sum = [red, t](float v) { return group_sum(red, t, D, v); };
    auto slot_max = [red, t](float v) { return group_max(red, t, D, v); };
    for (int j = max(fresh, c0); j <= min(last, c0 + D - 1); ++j) {
        const long long rj = r - (last - j);
        const float* row = hs.qkv + rj * hs.stride;
        const float kx = row[(long long)(hq + kvh) * D + t];
        const float vx = row[(long long)(hq + hkv + kvh) * D + t];
        const float ky = norm_rope_at(kx, hs.kw, hs.cos_t, hs.sin_t, rj, hs.eps, nrm, t, D, slot_sum);
        Code kcode, vcode;
        int kx8 = 0, vx8 = 0;
        encode_value(ky, KIND, &kcode, 0, &kx8, slot_max);
        encode_value(vx, KIND, &vcode, 0, &vx8, slot_max);
        if (stager) {
            put_code<KIND>(kst, (j - c0) * D + t, kcode);
            put_code<KIND>(vst, (j - c0) * D + t, vcode);
        }
        if (KIND == KIND_FP8 && t == 0) {
            kex[j - c0] = (float)(signed char)kx8;
            vex[j - c0] = (float)(signed char)vx8;
        }
        if (writer && stager && j == last) {  // the stored bytes: store_value's
            const long long dst = hs.slots[r] * hkv + kvh;
            put_code<KIND>((void*)kc, dst * D + t, kcode);
            put_code<KIND>((void*)vc, dst * D + t, vcode);
            if (KIND == KIND_FP8 && t == 0) {
                ((signed char*)ke)[dst] = (signed char)kx8;
                ((signed char*)ve)[dst] = (signed char)vx8;
            }
        }
    }
}

