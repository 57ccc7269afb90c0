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
            float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (h < n_heads) {
                v = __ldg(
                    reinterpret_cast<const float4 *>(qt + h * KF_DIM + c)); /* 16-byte aligned */
            }
            bq[nt][s][0] = kf_pack_h2(v.x, v.y);
            bq[nt][s][1] = kf_pack_h2(v.z, v.w);
        }
#pragma unroll
        for (int e = 0; e < 2; e++) {
            int hh = nt * 8 + 2 * p + e;
            wl[nt][e] = hh < n_heads ? wt[hh] : 0.0f;
        }
    }
}

#define KF_STAGES 3   /* groups of 16 keys in flight per warp */
#define KF_ROWB   192 /* shared bytes per key row: 128 + 64 so that two rows hit disjoint banks */

/* One stage of a warp's ring: 16 key rows and their scales. */
typedef struct kf_stage {
    uint8_t rows[16 * KF_ROWB];
    float scale[16];
} kf_stage_t;

__device__ __forceinline__ void kf_cp16(void *dst, const void *src, int src_bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(
                     (uint32_t)__cvta_generic_to_shared(dst)),
                 "l"(src), "r"(src_bytes));
}

/* Issues the copy of group g (rows 16g ..) into st; rows past n_keys read as zero. */
__device__ __forceinline__ void kf_issue(const uint8_t *keys8, const float *key_scale, int n_keys,
                                         int g, kf_stage_t *st, int lane)
{
#pragma unroll
    for (int i = 0; i < 4; i++) {
        int c = lane + 32 * i, row = c >> 3, part = c & 7;
        int r = g * 16 + row;
        const uint8_t *src = r < n_keys ? keys8 + (size_t)r * KF_DIM + part * 16 : keys8;
        kf_cp16(st->rows + row * KF_ROWB + part * 16, src, r < n_keys ? 16 : 0);
    }
    if (lane < 4) {
        int r = g * 16 + lane * 4;
        int bytes = (n_keys - r) * 4;
        bytes = bytes < 0 ? 0 : (bytes > 16 ? 16 : bytes);
        kf_cp16(st->scale + lane * 4, bytes > 0 ? key_scale + r : key_scale, bytes);
    }
}

/*
 * Scores the 16 keys staged in st: lanes with (lane & 3) == 0 get row lane/4 in *s0 and
 * row lane/4 + 8 in *s1 (zero rows score 0).
 */
__device__ __forceinline__ void kf_score_stage(const kf_stage_t *st, int lane,
                                               const uint32_t bq[8][8][2], const float wl[8][2],
                                               float *s0_p, float *s1_p)
{
    const int p = lane & 3, r0 = lane >> 2;
    const uint4 k0a = *reinterpret_cast<const uint4 *>(st->rows + r0 * KF_ROWB + p * 16);
    const uint4 k0b = *reinterpret_cast<const uint4 *>(st->rows + r0 * KF_ROWB + 64 + p * 16);
    const uint4 k1a = *reinterpret_cast<const uint4 *>(st->rows + (r0 + 8) * KF_ROWB + p * 16);
    const uint4 k1b = *reinterpret_cast<const uint4 *>(st->rows + (r0 + 8) * KF_ROWB + 64 + p * 16);
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
    *s0_p = s0 * st->scale[r0];
    *s1_p = s1 * st->scale[r0 + 8];
}

/*
 * A warp scores the work items first, first + stride, ... below n_items, item i
 * being the group map(i), with KF_STAGES groups in flight through its ring of
 * shared-memory stages, and calls emit(i, s0, s1) for each (all lanes; see
 * kf_score_stage for which lanes hold scores).
 */
template <class Map, class Emit>
__device__ __forceinline__ void kf_stream(const uint8_t *keys8, const float *key_scale, int n_keys,
                                          int first, int stride, int n_items, Map map, Emit emit,
                                          kf_stage_t *ring, int lane, const uint32_t bq[8][8][2],
                                          const float wl[8][2])
{
    int fi = first, ci = first, slot = 0;
#pragma unroll
    for (int s = 0; s < KF_STAGES; s++) {
        if (fi < n_items) {
            kf_issue(keys8, key_scale, n_keys, map(fi), &ring[s], lane);
            fi += stride;
        }
        asm volatile("cp.async.commit_group;\n" ::);
    }
    for (; ci < n_items; ci += stride) {
        asm volatile("cp.async.wait_group %0;\n" ::"n"(KF_STAGES - 1));
        __syncwarp();
        kf_stage_t *st = &ring[slot];
        float s0, s1;
        kf_score_stage(st, lane, bq, wl, &s0, &s1);
        emit(ci, s0, s1);
        __syncwarp();
        if (fi < n_items) {
            kf_issue(keys8, key_scale, n_keys, map(fi), st, lane);
            fi += stride;
        }
        asm volatile("cp.async.commit_group;\n" ::);
        slot = slot + 1 == KF_STAGES ? 0 : slot + 1;
    }
    asm volatile("cp.async.wait_all;\n" ::);
}

#endif
