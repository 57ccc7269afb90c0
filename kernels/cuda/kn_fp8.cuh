/*
 * kn_fp8.cuh - scoring fp8 (e4m3) indexer keys on tensor cores, shared by the
 * dense scorer (indexer.cu) and the two-stage selection (select.cu).
 *
 * mma.sync m16n8k16 in fp16 with fp32 accumulation: a warp scores 16 keys
 * against 64 heads (heads past n_heads have q = 0 and w = 0). The channels of
 * the dot product are permuted identically for q and k so that each thread
 * reads 16 contiguous key bytes: in k-step s (0..7) quad lane p holds channels
 * 64*(s/4) + 16p + 4*(s%4) + {0,1} (fragment halves 0) and + {2,3} (halves 1).
 * q is rounded to fp16 (relative error 2^-11); e4m3 keys convert exactly.
 */
#ifndef STRATA_KN_FP8_CUH
#define STRATA_KN_FP8_CUH

#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>

#define KF_DIM   128
#define KF_HEADS 64

__device__ __forceinline__ uint32_t kf_f8x2_to_h2(uint32_t two)
{
    __half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)two, __NV_E4M3);
    return (uint32_t)h.x | ((uint32_t)h.y << 16);
}

__device__ __forceinline__ uint32_t kf_pack_h2(float a, float b)
{
    __half2 h = __floats2half2_rn(a, b);
    return *reinterpret_cast<uint32_t *>(&h);
}

__device__ __forceinline__ void kf_mma_f16(float *c, const uint32_t *a, uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* The B fragments of one query row (8 head tiles x 8 k-steps) and this lane's weights. */
__device__ __forceinline__ void kf_load_query(const float *qt, const float *wt, int n_heads,
                                              int lane, uint32_t bq[8][8][2], float wl[8][2])
{
    const int p = lane & 3;
#pragma unroll
    for (int nt = 0; nt < 8; nt++) {
        int h = nt * 8 + (lane >> 2);
#pragma unroll
        for (int s = 0; s < 8; s++) {
            int c = 64 * (s >> 2) + 16 * p + 4 * (s & 3);
            float v[4] = {0, 0, 0, 0};
            if (h < n_heads) {
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    v[e] = qt[h * KF_DIM + c + e];
                }
            }
            bq[nt][s][0] = kf_pack_h2(v[0], v[1]);
            bq[nt][s][1] = kf_pack_h2(v[2], v[3]);
        }
#pragma unroll
        for (int e = 0; e < 2; e++) {
            int hh = nt * 8 + 2 * p + e;
            wl[nt][e] = hh < n_heads ? wt[hh] : 0.0f;
        }
    }
}

/*
 * Scores keys row0 .. row0+15: lanes with (lane & 3) == 0 get the score of
 * row0 + lane/4 in *s0 and of row0 + lane/4 + 8 in *s1 (rows past n_keys read as 0).
 */
__device__ __forceinline__ void kf_score16(const uint8_t *keys8, const float *key_scale, int n_keys,
                                           int row0, int lane, const uint32_t bq[8][8][2],
                                           const float wl[8][2], float *s0_p, float *s1_p)
{
    const int p = lane & 3;
    const int r0 = row0 + (lane >> 2), r1 = r0 + 8;
    uint4 k0a = make_uint4(0, 0, 0, 0), k0b = k0a, k1a = k0a, k1b = k0a;
    float sc0 = 0.0f, sc1 = 0.0f;
    if (r0 < n_keys) {
        const uint4 *src = reinterpret_cast<const uint4 *>(keys8 + (size_t)r0 * KF_DIM);
        k0a = __ldg(src + p);
        k0b = __ldg(src + 4 + p);
        sc0 = __ldg(key_scale + r0);
    }
    if (r1 < n_keys) {
        const uint4 *src = reinterpret_cast<const uint4 *>(keys8 + (size_t)r1 * KF_DIM);
        k1a = __ldg(src + p);
        k1b = __ldg(src + 4 + p);
        sc1 = __ldg(key_scale + r1);
    }
    const uint32_t w0[8] = {k0a.x, k0a.y, k0a.z, k0a.w, k0b.x, k0b.y, k0b.z, k0b.w};
    const uint32_t w1[8] = {k1a.x, k1a.y, k1a.z, k1a.w, k1b.x, k1b.y, k1b.z, k1b.w};
    float acc[8][4];
#pragma unroll
    for (int nt = 0; nt < 8; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            acc[nt][e] = 0.0f;
#pragma unroll
    for (int s = 0; s < 8; s++) {
        uint32_t a[4] = {kf_f8x2_to_h2(w0[s] & 0xffffu), kf_f8x2_to_h2(w1[s] & 0xffffu),
                         kf_f8x2_to_h2(w0[s] >> 16), kf_f8x2_to_h2(w1[s] >> 16)};
#pragma unroll
        for (int nt = 0; nt < 8; nt++) {
            kf_mma_f16(acc[nt], a, bq[nt][s][0], bq[nt][s][1]);
        }
    }
    float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
    for (int nt = 0; nt < 8; nt++) {
        s0 += wl[nt][0] * fmaxf(acc[nt][0], 0.0f) + wl[nt][1] * fmaxf(acc[nt][1], 0.0f);
        s1 += wl[nt][0] * fmaxf(acc[nt][2], 0.0f) + wl[nt][1] * fmaxf(acc[nt][3], 0.0f);
    }
    s0 += __shfl_xor_sync(0xffffffffu, s0, 1);
    s0 += __shfl_xor_sync(0xffffffffu, s0, 2);
    s1 += __shfl_xor_sync(0xffffffffu, s1, 1);
    s1 += __shfl_xor_sync(0xffffffffu, s1, 2);
    *s0_p = s0 * sc0;
    *s1_p = s1 * sc1;
}

#endif
