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

#include "kn_cuda.h"

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

/* The index score of this thread's two rows from their head products acc (the mma layout: rows
 * lane / 4 and lane / 4 + 8, heads 8 nt + 2 (lane % 4) ..): the sum over heads of weight times
 * ReLU, reduced over the four lanes of a row. */
__device__ __forceinline__ void kf_head_sum(const float (&acc)[8][4], const float wl[8][2],
                                            float *s0_p, float *s1_p)
{
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
    *s0_p = s0;
    *s1_p = s1;
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
    kn_zero(acc);
#pragma unroll
    for (int s = 0; s < 8; s++) {
        uint32_t a[4] = {kf_f8x2_to_h2(w0[s] & 0xffffu), kf_f8x2_to_h2(w1[s] & 0xffffu),
                         kf_f8x2_to_h2(w0[s] >> 16), kf_f8x2_to_h2(w1[s] >> 16)};
#pragma unroll
        for (int nt = 0; nt < 8; nt++) {
            kf_mma_f16(acc[nt], a, bq[nt][s][0], bq[nt][s][1]);
        }
    }
    float s0, s1;
    kf_head_sum(acc, wl, &s0, &s1);
    *s0_p = s0 * st->scale[r0];
    *s1_p = s1 * st->scale[r0 + 8];
}

/*
 * A warp scores the work items first, first + stride, ... below n_items, item i
 * being the group map(i), with KF_STAGES groups in flight through its ring of
 * shared-memory stages, and calls emit(i, map(i), s0, s1) for each (all lanes; see
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
        emit(ci, map(ci), s0, s1);
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

/* Weights of one query row as this lane needs them: wl[nt][e] = w[nt*8 + 2*(lane&3) + e]. */
__device__ __forceinline__ void kf_load_weights(const float *wt, int n_heads, int lane,
                                                float wl[8][2])
{
#pragma unroll
    for (int nt = 0; nt < 8; nt++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            int hh = nt * 8 + 2 * (lane & 3) + e;
            wl[nt][e] = hh < n_heads ? wt[hh] : 0.0f;
        }
}

/*
 * wgmma scorer (sm_90a): a warpgroup scores 64 keys (its 4 warps' 16-key groups, any four)
 * against 64 heads with 8 x wgmma m64n64k16 (fp16 in, fp32 accumulation): A = the keys,
 * converted from e4m3 in registers (the mma.sync A fragment layout, channel permutation as
 * above), B = q in shared memory (kf_store_query_smem), so no thread keeps the query in
 * registers. Each thread brings its own two key rows through a cp.async ring (kf_wg_issue),
 * three steps ahead. The result per key equals the mma.sync scorer's up to the tensor cores'
 * summation order.
 */
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define KF_WGMMA 1
#else
#define KF_WGMMA 0
#endif

/* Element offset of (head, k) in the query tile: 128-byte-wide panels of 64 k values, 128-byte
 * swizzle (as attn.cu's ka_swz). */
__device__ __forceinline__ int kf_swz(int row, int col)
{
    return (col >> 6) * (64 * 64) + row * 64 + ((((col >> 3) ^ row) & 7) << 3) + (col & 7);
}

/* q of one query row as the B operand: qs[h][16 s + kk] = fp16(q[h][channel of (s, kk)]) with
 * kk = 2t + e -> channel 64(s/4) + 16t + 4(s%4) + e and kk = 2t + 8 + e -> the same + 2. */
__device__ __forceinline__ void kf_store_query_smem(const float *qt, int n_heads, __half *qs,
                                                    int tid)
{
    /* 128 threads, 16 float4 each: all loads first, then the stores. */
    float4 v[16];
#pragma unroll
    for (int u = 0; u < 16; u++) {
        int i = tid + 128 * u, h = i & 63, c0 = (i >> 6) * 4;
        v[u] = h < n_heads ? __ldg(reinterpret_cast<const float4 *>(qt + h * KF_DIM + c0))
                           : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
#pragma unroll
    for (int u = 0; u < 16; u++) {
        int i = tid + 128 * u, h = i & 63, c0 = (i >> 6) * 4;
        int s = ((c0 >> 6) << 2) | ((c0 >> 2) & 3), t = (c0 >> 4) & 3, k = 16 * s + 2 * t;
        *reinterpret_cast<__half2 *>(&qs[kf_swz(h, k)]) = __floats2half2_rn(v[u].x, v[u].y);
        *reinterpret_cast<__half2 *>(&qs[kf_swz(h, k + 8)]) = __floats2half2_rn(v[u].z, v[u].w);
    }
}

/*
 * The key ring of a warpgroup: KF_WG_STAGES stages of 64 keys. Each thread copies its own
 * 2 x 32 bytes (rows g and g + 8 of its warp's group, bytes 16t.. and 64 + 16t..) and the two
 * scales with cp.async and reads back only what it copied, so no barrier is needed: chunk c
 * of thread tid sits at k[c][tid] (conflict-free 16-byte reads).
 */
#define KF_WG_STAGES 4
typedef struct kf_wg_stage {
    uint4 k[4][128];
    float sc[2][128];
    int grp[128]; /* the group each thread's copies belong to (-1: none) */
} kf_wg_stage_t;

/* Dynamic shared memory of a wgmma scoring CTA: the query tile, then a ring of ns stages. */
#define KF_WG_SMEM_N(ns) (1024 + 64 * KF_DIM * 2 + (ns) * (int)sizeof(kf_wg_stage_t))
#define KF_WG_SMEM       KF_WG_SMEM_N(KF_WG_STAGES)

__device__ __forceinline__ void kf_cp4(void *dst, const void *src, int src_bytes)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(
                     (uint32_t)__cvta_generic_to_shared(dst)),
                 "l"(src), "r"(src_bytes));
}

#if KF_WGMMA
__device__ __forceinline__ uint64_t kf_desc(uint32_t addr)
{
    return (uint64_t)((addr & 0x3ffff) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(1024 >> 4) << 32) |
           ((uint64_t)1 << 62);
}

/* d (64 keys x 64 heads) (+)= A (64 x 16, registers) * B (16 x 64, K-major in shared memory). */
__device__ __forceinline__ void kf_wgmma_64x64(float (&d)[8][4], const uint32_t (&a)[4],
                                               uint64_t db, int accumulate)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
                 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,"
                 "%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, {%32,%33,%34,%35}, %36, p, 1, 1, 0;\n"
                 "}\n"
                 : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]),
                   "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]),
                   "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]),
                   "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]),
                   "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]),
                   "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]),
                   "+f"(d[7][2]), "+f"(d[7][3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate));
}

/* Issues this thread's copies of 16-key group grp (none when grp < 0) and commits a group. */
__device__ __forceinline__ void kf_wg_issue(const uint8_t *keys8, const float *key_scale,
                                            int n_keys, int grp, kf_wg_stage_t *st, int tid)
{
    const int lane = tid & 31, t = lane & 3;
    st->grp[tid] = grp;
    if (grp >= 0) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int row = grp * 16 + (lane >> 2) + 8 * h;
            const bool ok = row < n_keys;
            const uint8_t *src = ok ? keys8 + (size_t)row * KF_DIM : keys8;
            kf_cp16(&st->k[2 * h][tid], src + 16 * t, ok ? 16 : 0);
            kf_cp16(&st->k[2 * h + 1][tid], src + 64 + 16 * t, ok ? 16 : 0);
            kf_cp4(&st->sc[h][tid], ok ? key_scale + row : key_scale, ok ? 4 : 0);
        }
    }
    asm volatile("cp.async.commit_group;\n" ::);
}

/*
 * A warpgroup (all 128 threads of the CTA call this) scores items first + 4*wg + j*4*n_wg +
 * (warp in the warpgroup) below n_items, item i being the 16-key group map(i), and calls
 * emit(i, map(i), s0, s1) per valid item (all lanes of the warp; lanes with (lane & 3) == 0
 * hold key lane/4 in s0 and lane/4 + 8 in s1). qs: kf_store_query_smem's tile, fenced for the async
 * proxy and visible; ring: NS stages (default KF_WG_STAGES). Keys are in flight NS - 1 steps
 * ahead; map is evaluated one step before its keys are issued.
 */
template <int NS = KF_WG_STAGES, class Map, class Emit>
__device__ __forceinline__ void kf_wg_stream(const uint8_t *keys8, const float *key_scale,
                                             int n_keys, int first, int n_items, int wg, int n_wg,
                                             Map map, Emit emit, const __half *qs,
                                             kf_wg_stage_t *ring, const float (&wl)[8][2])
{
    const int tid = threadIdx.x, wq = tid >> 5;
    const uint32_t qa = (uint32_t)__cvta_generic_to_shared(qs);
    const int stride = 4 * n_wg, base0 = first + 4 * wg;
#pragma unroll
    for (int j = 0; j < NS - 1; j++) {
        const int item = base0 + j * stride + wq;
        kf_wg_issue(keys8, key_scale, n_keys, item < n_items ? map(item) : -1, &ring[j], tid);
    }
    int ahead = base0 + (NS - 1) * stride + wq;
    int g_ahead = ahead < n_items ? map(ahead) : -1;
    float d[8][4];
    kn_zero(d);
    int slot = 0;
    for (int base = base0; base < n_items; base += stride) {
        asm volatile("cp.async.wait_group %0;\n" ::"n"(NS - 2));
        kf_wg_stage_t *st = &ring[slot];
        const uint4 c0 = st->k[0][tid], c1 = st->k[1][tid], c2 = st->k[2][tid], c3 = st->k[3][tid];
        const float sc0 = st->sc[0][tid], sc1 = st->sc[1][tid];
        const int grp = st->grp[tid];
        const uint32_t w0[8] = {c0.x, c0.y, c0.z, c0.w, c1.x, c1.y, c1.z, c1.w};
        const uint32_t w1[8] = {c2.x, c2.y, c2.z, c2.w, c3.x, c3.y, c3.z, c3.w};
        uint32_t a[8][4];
#pragma unroll
        for (int s = 0; s < 8; s++) {
            a[s][0] = kf_f8x2_to_h2(w0[s] & 0xffffu);
            a[s][1] = kf_f8x2_to_h2(w1[s] & 0xffffu);
            a[s][2] = kf_f8x2_to_h2(w0[s] >> 16);
            a[s][3] = kf_f8x2_to_h2(w1[s] >> 16);
        }
        /* The slot consumed one step ago takes the keys NS - 1 steps ahead. */
        const int refill = slot == 0 ? NS - 1 : slot - 1;
        kf_wg_issue(keys8, key_scale, n_keys, g_ahead, &ring[refill], tid);
        ahead += stride;
        g_ahead = ahead < n_items ? map(ahead) : -1;
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
        for (int s = 0; s < 8; s++) {
            kf_wgmma_64x64(d, a[s], kf_desc(qa + (s >> 2) * (64 * 128) + (s & 3) * 32), s > 0);
        }
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
        float s0, s1;
        kf_head_sum(d, wl, &s0, &s1);
        if (base + wq < n_items) {
            emit(base + wq, grp, s0 * sc0, s1 * sc1);
        }
        slot = slot + 1 == NS ? 0 : slot + 1;
    }
    asm volatile("cp.async.wait_all;\n" ::);
}
#endif

/* Dynamic shared memory of an mma.sync scoring CTA: 4 warps' rings. */
#define KF_MMA_SMEM (4 * KF_STAGES * (int)sizeof(kf_stage_t))

/* The 1024-byte-aligned start of dynamic shared memory (launches ask for 1 KiB more). */
__device__ __forceinline__ unsigned char *kf_align1k(unsigned char *p)
{
    return reinterpret_cast<unsigned char *>(((uintptr_t)p + 1023) & ~(uintptr_t)1023);
}

/*
 * A scoring kernel's loop over items first .. n_items of the query q (weights w) by mma.sync:
 * each warp loads the query fragments and streams items first + its warp, then every n_warps,
 * through its ring in dyn (KF_MMA_SMEM). Warps with no item return at once.
 */
template <class Map, class Emit>
__device__ __forceinline__ void kf_mma_score(const float *q, const float *w, int n_heads,
                                             const uint8_t *keys8, const float *key_scale,
                                             int n_keys, int first, int n_items, Map map, Emit emit,
                                             unsigned char *dyn)
{
    kf_stage_t(*ring)[KF_STAGES] = reinterpret_cast<kf_stage_t(*)[KF_STAGES]>(dyn);
    const int lane = threadIdx.x & 31;
    const int warp_id = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int n_warps = (gridDim.x * blockDim.x) >> 5;
    if (first + warp_id >= n_items) {
        return;
    }
    uint32_t bq[8][8][2];
    float wl[8][2];
    kf_load_query(q, w, n_heads, lane, bq, wl);
    kf_stream(keys8, key_scale, n_keys, first + warp_id, n_warps, n_items, map, emit,
              ring[threadIdx.x >> 5], lane, bq, wl);
}

#if KF_WGMMA
/*
 * The same by wgmma (one warpgroup a CTA): the query and weights staged in dyn (aligned to
 * 1 KiB) for kf_wg_stream<NS>, which takes 4 items a CTA from first + 4 * blockIdx.x. A CTA with
 * no item returns at once (all its threads alike: the staging has a CTA barrier).
 */
template <int NS = KF_WG_STAGES, class Map, class Emit>
__device__ __forceinline__ void kf_wg_score(const float *q, const float *w, int n_heads,
                                            const uint8_t *keys8, const float *key_scale,
                                            int n_keys, int first, int n_items, Map map, Emit emit,
                                            unsigned char *dyn)
{
    if (first + 4 * (int)blockIdx.x >= n_items) {
        return;
    }
    unsigned char *base = kf_align1k(dyn);
    __half *qs = reinterpret_cast<__half *>(base);
    kf_wg_stage_t *ring = reinterpret_cast<kf_wg_stage_t *>(base + 64 * KF_DIM * 2);
    float wl[8][2];
    kf_store_query_smem(q, n_heads, qs, threadIdx.x);
    kf_load_weights(w, n_heads, threadIdx.x & 31, wl);
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();
    kf_wg_stream<NS>(keys8, key_scale, n_keys, first, n_items, blockIdx.x, gridDim.x, map, emit, qs,
                     ring, wl);
}
#endif

#endif
