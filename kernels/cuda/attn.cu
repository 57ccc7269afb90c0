/*
 * attn.cu - sparse decode attention partial (MLA in MQA mode) on tensor cores,
 * and the LSE merge.
 *
 * One CTA of 8 warps takes one batch entry and 64 heads and walks the selected
 * rows in tiles of 64, double-buffered in shared memory by cp.async (each row
 * fetched through its own pointer). Two loops share the grid, the shared-memory
 * tiles and the products:
 * - ka_ws_kernel (the default, sm_90a): warpgroup 0 computes S = Q K^T (wgmma
 *   m64n64k16), the online softmax in registers and O[:, 0:256] += P V with P
 *   from registers; warpgroup 1 loads the tiles and computes O[:, 256:512] += P V
 *   with P from shared memory; S of tile t+1 overlaps P V of tile t (see below).
 * - ka_sparse_attn_kernel (STRATA_KN_ATTN=serial, and the body of both where
 *   wgmma is not built): all warps take each tile through S (wgmma m64n32k16 or
 *   mma.sync m16n8k16), the softmax with shared-memory reductions, and P V
 *   (wgmma m64n256k16 or mma.sync), one step after the other.
 * Shared-memory tiles are unpadded, in 128-byte swizzled panels (ka_swz), so that
 * Q plus two K tiles fit and both ldmatrix and wgmma read them.
 */
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>

#include "ka_mma.cuh"
#include "kn_cuda.h"

#define KA_DQK     576
#define KA_DV      512
#define KA_HG      64           /* heads per CTA */
#define KA_BN      64           /* rows per tile */
#define KA_CH      (KA_DQK / 8) /* 16-byte chunks per row */
#define KA_THREADS 256

struct ka_smem {
    __nv_bfloat16 q[KA_HG * KA_DQK];
    __nv_bfloat16 k[2][KA_BN * KA_DQK];
    __nv_bfloat16 p[KA_HG * KA_BN];
    float red_max[2][KA_HG];
    float red_sum[2][KA_HG];
    float m[2][KA_HG];
    float l[KA_HG];
};

/* The row pointer that thread tid copies in tile t (4 threads per row); rows past the end
 * repeat row 0, whose scores are masked. */
__device__ __forceinline__ const __nv_bfloat16 *ka_row_ptr(const __nv_bfloat16 *const *rows,
                                                           int n_rows, int t)
{
    int gr = t * KA_BN + (threadIdx.x >> 2);
    return rows[gr < n_rows ? gr : 0];
}

/* Issues this thread's 18 chunks of its row of tile t into buffer buf. */
__device__ __forceinline__ void ka_load_tile(ka_smem *sm, int buf, const __nv_bfloat16 *src)
{
    const int r = threadIdx.x >> 2, part = threadIdx.x & 3;
#pragma unroll
    for (int i = 0; i < KA_CH / 4; i++) {
        int ch = part + 4 * i;
        ka_cp16(&sm->k[buf][ka_swz(r, ch * 8)], src + ch * 8);
    }
    asm volatile("cp.async.commit_group;\n" ::);
}

/* Writes the result of an empty row list (out = 0, lse = -inf) for this CTA's heads. */
__device__ __forceinline__ void ka_write_empty(float *out, float *lse, size_t head0)
{
    for (int i = threadIdx.x; i < KA_HG * KA_DV; i += KA_THREADS) {
        out[head0 * KA_DV + i] = 0.0f;
    }
    if (threadIdx.x < KA_HG) {
        lse[head0 + threadIdx.x] = -INFINITY;
    }
}

#if KA_WGMMA
/* Scales this thread's accumulator values of head h0 by a0 and of head h0 + 8 by a1. */
__device__ __forceinline__ void ka_scale_acc(float (&acc)[4][8][4], float a0, float a1)
{
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 8; j++) {
            acc[i][j][0] *= a0;
            acc[i][j][1] *= a0;
            acc[i][j][2] *= a1;
            acc[i][j][3] *= a1;
        }
}

/* Writes O / l for heads h0 and h0 + 8, columns col0 .. col0 + 255. */
__device__ __forceinline__ void ka_ws_store(const float (&acc)[4][8][4], float *out, size_t head0,
                                            int h0, int col0, float inv0, float inv1)
{
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const float inv = half ? inv1 : inv0;
        float *o = out + (head0 + h0 + half * 8) * KA_DV + col0 + (lane & 3) * 2;
#pragma unroll
        for (int j = 0; j < 32; j++) {
            *reinterpret_cast<float2 *>(o + j * 8) = make_float2(
                acc[j >> 3][j & 7][half * 2] * inv, acc[j >> 3][j & 7][half * 2 + 1] * inv);
        }
    }
}
#endif

/* The factor alpha = exp2(m_old - m_new) by which head h's running sums shrink in this tile:
 * m_old is the running max of parity par, m_new also takes both halves' maxima of the tile. */
__device__ __forceinline__ float ka_alpha(const ka_smem *sm, int par, int h)
{
    float mold = sm->m[par][h];
    float mnew = fmaxf(mold, fmaxf(sm->red_max[0][h], sm->red_max[1][h]));
    return exp2f(mold - mnew);
}

/* Copies Q of this CTA's heads into shared memory and starts the running max and sum. */
__device__ __forceinline__ void ka_serial_start(ka_smem *sm, const __nv_bfloat16 *q, size_t head0)
{
    const int tid = threadIdx.x;
    for (int i = tid; i < KA_HG * KA_CH; i += KA_THREADS) {
        int h = i / KA_CH, ch = i % KA_CH;
        *reinterpret_cast<uint4 *>(&sm->q[ka_swz(h, ch * 8)]) =
            *reinterpret_cast<const uint4 *>(q + (head0 + h) * KA_DQK + ch * 8);
    }
    if (tid < KA_HG) {
        sm->m[0][tid] = -INFINITY;
        sm->l[tid] = 0.0f;
    }
}

/* S = Q K^T of tile kt: this warp's 16 heads (wm*16..) x 32 rows (wn*32..). */
__device__ __forceinline__ void ka_serial_qk(ka_smem *sm, const __nv_bfloat16 *kt, float (&s)[4][4])
{
    const int tid = threadIdx.x, warp = tid >> 5, wn = warp >> 2;
    kn_zero(s);
#if KA_WGMMA
    /* Warpgroup wn: all 64 heads x rows wn*32..; K advances 16 values = 32 bytes. */
    const uint32_t qa = ka_smem_addr(sm->q), kb = ka_smem_addr(kt) + wn * 32 * 128;
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll 4
    for (int ks = 0; ks < KA_DQK / 16; ks++) {
        uint32_t off = (ks >> 2) * (64 * 128) + (ks & 3) * 32;
        ka_wgmma_64x32(s, ka_desc(qa + off), ka_desc(kb + off));
    }
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#else
    const int lane = tid & 31, wm = warp & 3;
    const int qa_row = wm * 16 + (lane & 15), qa_col = (lane >> 4) * 8;
    const int kb_row = wn * 32 + (lane & 7) + ((lane >> 4) << 3), kb_col = ((lane >> 3) & 1) * 8;
#pragma unroll 4
    for (int k0 = 0; k0 < KA_DQK; k0 += 16) {
        uint32_t a[4], b0[4], b1[4];
        ka_ldm_x4(a, &sm->q[ka_swz(qa_row, k0 + qa_col)]);
        ka_ldm_x4(b0, &kt[ka_swz(kb_row, k0 + kb_col)]);
        ka_ldm_x4(b1, &kt[ka_swz(kb_row + 16, k0 + kb_col)]);
        ka_mma(s[0], a, b0[0], b0[1]);
        ka_mma(s[1], a, b0[2], b0[3]);
        ka_mma(s[2], a, b1[0], b1[1]);
        ka_mma(s[3], a, b1[2], b1[3]);
    }
#endif
}

/*
 * The online softmax of one tile: scales S to the log2 domain, masks the rows past the
 * valid ones, writes P = exp2(S - m_new) to shared memory and moves the running max (into
 * parity par ^ 1) and sum on. Two CTA barriers; afterwards m[par] still holds the old max.
 */
__device__ __forceinline__ void ka_serial_softmax(ka_smem *sm, float (&s)[4][4], int valid,
                                                  float scale_log2, int par)
{
    const int tid = threadIdx.x;
    const int warp = tid >> 5, lane = tid & 31;
    const int wm = warp & 3, wn = warp >> 2;
    const int h0 = wm * 16 + (lane >> 2);
    float mx[2] = {-INFINITY, -INFINITY}; /* heads h0 and h0+8 */
#pragma unroll
    for (int nt = 0; nt < 4; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            int r = wn * 32 + nt * 8 + (lane & 3) * 2 + (e & 1);
            float v = r < valid ? s[nt][e] * scale_log2 : -INFINITY;
            s[nt][e] = v;
            mx[e >> 1] = fmaxf(mx[e >> 1], v);
        }
#pragma unroll
    for (int i = 0; i < 2; i++) {
        mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
        mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));
    }
    if ((lane & 3) == 0) {
        sm->red_max[wn][h0] = mx[0];
        sm->red_max[wn][h0 + 8] = mx[1];
    }
    __syncthreads();
    float sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int i = 0; i < 2; i++) {
        int h = h0 + i * 8;
        float mnew = fmaxf(sm->m[par][h], fmaxf(sm->red_max[0][h], sm->red_max[1][h]));
#pragma unroll
        for (int nt = 0; nt < 4; nt++) {
            float p0 = exp2f(s[nt][2 * i] - mnew), p1 = exp2f(s[nt][2 * i + 1] - mnew);
            sum[i] += p0 + p1;
            int r = wn * 32 + nt * 8 + (lane & 3) * 2;
            *reinterpret_cast<__nv_bfloat162 *>(&sm->p[ka_swz(h, r)]) =
                __floats2bfloat162_rn(p0, p1);
        }
        sum[i] += __shfl_xor_sync(0xffffffffu, sum[i], 1);
        sum[i] += __shfl_xor_sync(0xffffffffu, sum[i], 2);
    }
    if ((lane & 3) == 0) {
        sm->red_sum[wn][h0] = sum[0];
        sm->red_sum[wn][h0 + 8] = sum[1];
    }
#if KA_WGMMA
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
    __syncthreads();
    /* Running max and sum, double-buffered by parity so that readers below see the old m. */
    if (tid < KA_HG) {
        float mold = sm->m[par][tid];
        float mnew = fmaxf(mold, fmaxf(sm->red_max[0][tid], sm->red_max[1][tid]));
        float alpha = exp2f(mold - mnew);
        sm->l[tid] = sm->l[tid] * alpha + sm->red_sum[0][tid] + sm->red_sum[1][tid];
        sm->m[par ^ 1][tid] = mnew;
    }
}

#if KA_WGMMA
/* O = alpha O + P V: warpgroup wn takes all 64 heads x value columns wn*256..; this thread
 * holds heads h0 and h0 + 8. P was written by ordinary stores: fence, barrier (above). */
__device__ __forceinline__ void ka_serial_pv(ka_smem *sm, const __nv_bfloat16 *kt,
                                             float (&acc)[4][8][4], int par)
{
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int wn = warp >> 2, h0 = (warp & 3) * 16 + (lane >> 2);
    ka_scale_acc(acc, ka_alpha(sm, par, h0), ka_alpha(sm, par, h0 + 8));
    const uint32_t pa = ka_smem_addr(sm->p), vb = ka_smem_addr(kt) + wn * 4 * (64 * 128);
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
    for (int kk = 0; kk < KA_BN / 16; kk++) {
        ka_wgmma_64x256_tb(acc, ka_desc(pa + kk * 32), ka_desc_mn(vb + kk * 16 * 128));
    }
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
}
#else
/* O = alpha O + P V for 64 heads x this warp's 64 value columns (warp*64..), by mma.sync. */
__device__ __forceinline__ void ka_serial_pv(ka_smem *sm, const __nv_bfloat16 *kt,
                                             float (&acc)[4][8][4], int par)
{
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
#pragma unroll
    for (int mi = 0; mi < 4; mi++) {
#pragma unroll
        for (int half = 0; half < 2; half++) {
            float alpha = ka_alpha(sm, par, mi * 16 + (lane >> 2) + half * 8);
#pragma unroll
            for (int nj = 0; nj < 8; nj++) {
                acc[mi][nj][half * 2] *= alpha;
                acc[mi][nj][half * 2 + 1] *= alpha;
            }
        }
    }
#pragma unroll
    for (int k0 = 0; k0 < KA_BN; k0 += 16) {
        uint32_t a[4][4];
#pragma unroll
        for (int mi = 0; mi < 4; mi++) {
            ka_ldm_x4(a[mi], &sm->p[ka_swz(mi * 16 + (lane & 15), k0 + (lane >> 4) * 8)]);
        }
#pragma unroll
        for (int nj = 0; nj < 8; nj += 2) {
            uint32_t bb[4];
            int col = warp * 64 + nj * 8 + (lane >> 4) * 8;
            ka_ldm_x4_t(bb, &kt[ka_swz(k0 + (lane & 7) + ((lane >> 3) & 1) * 8, col)]);
#pragma unroll
            for (int mi = 0; mi < 4; mi++) {
                ka_mma(acc[mi][nj], a[mi], bb[0], bb[1]);
                ka_mma(acc[mi][nj + 1], a[mi], bb[2], bb[3]);
            }
        }
    }
}
#endif

/* Writes O / l and the LSE of this CTA's heads; par is the parity of the final running max. */
__device__ __forceinline__ void ka_serial_store(const ka_smem *sm, const float (&acc)[4][8][4],
                                                float *out, float *lse, size_t head0, int par)
{
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
#if KA_WGMMA
    const int h0 = (warp & 3) * 16 + (lane >> 2);
    ka_ws_store(acc, out, head0, h0, (warp >> 2) * 256, 1.0f / sm->l[h0], 1.0f / sm->l[h0 + 8]);
#else
#pragma unroll
    for (int mi = 0; mi < 4; mi++) {
#pragma unroll
        for (int half = 0; half < 2; half++) {
            int h = mi * 16 + (lane >> 2) + half * 8;
            float inv = 1.0f / sm->l[h];
            float *o = out + (head0 + h) * KA_DV + warp * 64 + (lane & 3) * 2;
#pragma unroll
            for (int nj = 0; nj < 8; nj++) {
                *reinterpret_cast<float2 *>(o + nj * 8) =
                    make_float2(acc[mi][nj][half * 2] * inv, acc[mi][nj][half * 2 + 1] * inv);
            }
        }
    }
#endif
    if (threadIdx.x < KA_HG) {
        lse[head0 + threadIdx.x] =
            sm->m[par][threadIdx.x] * 0.69314718056f + logf(sm->l[threadIdx.x]);
    }
}

/*
 * The serial loop (STRATA_KN_ATTN=serial; the only loop where wgmma is not built): all 8 warps
 * take each tile through S, the softmax and P V in turn, with three CTA barriers per tile.
 */
__device__ __forceinline__ void ka_serial_body(ka_smem *sm, const __nv_bfloat16 *q,
                                               const __nv_bfloat16 *const *rows, int n_rows,
                                               float scale_log2, float *out, float *lse,
                                               size_t head0)
{
    ka_load_tile(sm, 0, ka_row_ptr(rows, n_rows, 0));
    const int n_tiles = (n_rows + KA_BN - 1) / KA_BN;
    const __nv_bfloat16 *next_ptr = n_tiles > 1 ? ka_row_ptr(rows, n_rows, 1) : NULL;
    ka_serial_start(sm, q, head0);

    float acc[4][8][4]; /* PV phase: 64 heads x columns warp*64.. */
    kn_zero(acc);

    int par = 0;
    for (int t = 0; t < n_tiles; t++) {
        const int buf = t & 1;
        asm volatile("cp.async.wait_all;\n" ::);
#if KA_WGMMA
        /* The tile (and Q) were written by this thread; wgmma reads them through the async proxy. */
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
        __syncthreads();
        if (t + 1 < n_tiles) {
            ka_load_tile(sm, buf ^ 1, next_ptr);
            if (t + 2 < n_tiles) {
                next_ptr = ka_row_ptr(rows, n_rows, t + 2);
            }
        }
        const __nv_bfloat16 *kt = sm->k[buf];
        float s[4][4];
        ka_serial_qk(sm, kt, s);
        ka_serial_softmax(sm, s, n_rows - t * KA_BN, scale_log2, par);
        ka_serial_pv(sm, kt, acc, par);
        par ^= 1;
    }
    __syncthreads();
    ka_serial_store(sm, acc, out, lse, head0, par);
}

/* wgmma's swizzle atoms need 1024-byte alignment; the launch asks for 1 KiB more. */
__device__ __forceinline__ unsigned char *ka_smem_base(unsigned char *raw)
{
    return reinterpret_cast<unsigned char *>(((uintptr_t)raw + 1023) & ~(uintptr_t)1023);
}

__global__ void __launch_bounds__(KA_THREADS, 1)
    ka_sparse_attn_kernel(const __nv_bfloat16 *q, int n_heads, const __nv_bfloat16 *const *rows_all,
                          int n_rows, float scale_log2, float *out, float *lse)
{
    extern __shared__ __align__(128) unsigned char ka_raw[];
    const size_t head0 = (size_t)blockIdx.y * n_heads + (size_t)blockIdx.x * KA_HG;
    if (n_rows == 0) {
        ka_write_empty(out, lse, head0);
        return;
    }
    ka_serial_body(reinterpret_cast<ka_smem *>(ka_smem_base(ka_raw)), q,
                   rows_all + (size_t)blockIdx.y * n_rows, n_rows, scale_log2, out, lse, head0);
}

/*
 * The warp-specialised kernel (the default; STRATA_KN_ATTN=serial takes the loop above).
 * Same grid, 256 threads and shared memory as the serial one, but the two warpgroups have
 * roles, so that one tile's softmax and products overlap the next tile's loads and S:
 *   warpgroup 0: S = Q K^T for the whole 64 x 64 tile (m64n64k16, both operands in shared
 *     memory), the softmax in registers (a head's row lives in one quad: no shared-memory
 *     reduction), P to shared memory for warpgroup 1, and O[:, 0:256] += P V with P taken
 *     straight from its registers (m64n256k16, A in registers). It issues S of tile t+1 right
 *     behind P V of tile t.
 *   warpgroup 1: the loads (every row through its own pointer, 16-byte cp.async into the
 *     swizzled tile, completion counted on the tile's mbarrier; optionally a bulk L2 prefetch
 *     of the rows pf tiles further on) and O[:, 256:512] += P V with P from shared memory.
 * Two tile buffers; warpgroup 1 refills buffer t&1 with tile t+2 once both warpgroups are done
 * with tile t. Named barriers (256 threads) pass P and the rescale factors from warpgroup 0 to
 * warpgroup 1 (KA_BAR_PREADY) and back (KA_BAR_PFREE), and tell warpgroup 1 that warpgroup 0's
 * P V of tile t is done (KA_BAR_KFREE). Each barrier's arrivals alternate with the other side's
 * waits, so no side can arrive twice at one barrier before the other has waited.
 */
#define KA_BAR_PREADY 1
#define KA_BAR_PFREE  2
#define KA_BAR_KFREE  3
#define KA_BAR_FINAL  4
/* No L2 prefetch by default: on the H200 any distance was slower (74.5 us without, 93.5-94.9 us
 * with 1-3 tiles; docs/performance.md). */
#ifndef KA_PF_DEFAULT
#define KA_PF_DEFAULT 0
#endif

struct ka_ws_smem {
    __nv_bfloat16 q[KA_HG * KA_DQK];
    __nv_bfloat16 k[2][KA_BN * KA_DQK];
    __nv_bfloat16 p[KA_HG * KA_BN];
    float alpha[KA_HG]; /* rescale factor of the running sums, this tile */
    float inv_l[KA_HG];
    unsigned long long full[2]; /* tile buffer b holds its next tile */
};

#if KA_WGMMA
__device__ __forceinline__ void ka_bar_sync(int id)
{
    asm volatile("bar.sync %0, 256;\n" ::"r"(id) : "memory");
}

__device__ __forceinline__ void ka_bar_arrive(int id)
{
    asm volatile("bar.arrive %0, 256;\n" ::"r"(id) : "memory");
}

__device__ __forceinline__ void ka_mbar_wait(unsigned long long *bar, uint32_t parity)
{
    uint32_t done;
    do {
        asm volatile("{\n.reg .pred p;\n"
                     "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     "selp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(ka_smem_addr(bar)), "r"(parity)
                     : "memory");
    } while (!done);
    __syncwarp();
}

__device__ __forceinline__ void ka_fence_async(void)
{
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

__device__ __forceinline__ void ka_wg_fence(void)
{
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

__device__ __forceinline__ void ka_wg_commit(void)
{
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

template <int N> __device__ __forceinline__ void ka_wg_wait(void)
{
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

/* The 4 row pointers this thread of warpgroup 1 copies in tile t (rows lr, lr+16, ..). */
__device__ __forceinline__ void ka_ws_ptrs(const __nv_bfloat16 *const *rows, int n_rows, int t,
                                           int lr, const __nv_bfloat16 *(&rp)[4])
{
#pragma unroll
    for (int i = 0; i < 4; i++) {
        int gr = t * KA_BN + i * 16 + lr;
        rp[i] = rows[gr < n_rows ? gr : 0];
    }
}

/* Issues this thread's 36 chunks of a tile (8 threads per row, 128 contiguous bytes per row
 * and instruction) and counts their completion on bar. */
__device__ __forceinline__ void ka_ws_load(__nv_bfloat16 *dst, const __nv_bfloat16 *const (&rp)[4],
                                           int lr, int lc, unsigned long long *bar)
{
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int r = i * 16 + lr;
#pragma unroll
        for (int c = 0; c < KA_CH / 8; c++) {
            const int ch = c * 8 + lc;
            ka_cp16(&dst[ka_swz(r, ch * 8)], rp[i] + ch * 8);
        }
    }
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(ka_smem_addr(bar))
                 : "memory");
}

__device__ __forceinline__ void ka_prefetch_row(const __nv_bfloat16 *row)
{
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(row), "r"(KA_DQK * 2)
                 : "memory");
}

/* x, opaque to the compiler: keeps descriptor arithmetic inside the loop instead of 72 hoisted
 * registers. */
__device__ __forceinline__ uint32_t ka_opaque(uint32_t x)
{
    asm volatile("mov.b32 %0, %0;\n" : "+r"(x));
    return x;
}

/* S (64 heads x 64 rows) = Q K^T over k-steps [k0, k1) of 16 values; k0 == 0 starts from 0. */
template <int K0, int K1>
__device__ __forceinline__ void ka_ws_qk(float (&s)[8][4], uint32_t qa, uint32_t kb)
{
#pragma unroll
    for (int ks = K0; ks < K1; ks++) {
        const uint32_t off = (ks >> 2) * (64 * 128) + (ks & 3) * 32;
        if (ks == 0) {
            ka_wgmma_64x64<0>(s, ka_desc(qa + off), ka_desc(kb + off));
        } else {
            ka_wgmma_64x64<1>(s, ka_desc(qa + off), ka_desc(kb + off));
        }
    }
}

/* Warpgroup 0: S, softmax, P, O[:, 0:256]. */
__device__ __forceinline__ void ka_ws_wg0(ka_ws_smem *sm, int n_rows, float scale_log2, float *out,
                                          float *lse, size_t head0)
{
    const int tid = threadIdx.x, lane = tid & 31;
    const int h0 = (tid >> 5) * 16 + (lane >> 2);
    const int n_tiles = (n_rows + KA_BN - 1) / KA_BN;
    const uint32_t qa = ka_smem_addr(sm->q);
    float acc[4][8][4], s[8][4];
    uint32_t pk[4][4];
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    kn_zero(acc);

    ka_mbar_wait(&sm->full[0], 0);
    ka_fence_async();
    ka_wg_fence();
    ka_ws_qk<0, KA_DQK / 16>(s, qa, ka_smem_addr(sm->k[0]));
    ka_wg_commit();
    ka_wg_wait<0>();
    for (int t = 0; t < n_tiles; t++) {
        /* Softmax of tile t in the log2 domain; rows past the end are masked. A head's 64
         * scores sit in one quad (16 each), so its max takes two shuffles. */
        const int valid = n_rows - t * KA_BN;
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int c = j * 8 + (lane & 3) * 2 + (e & 1);
                const float v = c < valid ? s[j][e] * scale_log2 : -INFINITY;
                s[j][e] = v;
                mx[e >> 1] = fmaxf(mx[e >> 1], v);
            }
        float al[2];
#pragma unroll
        for (int i = 0; i < 2; i++) {
            mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
            mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));
            const float mnew = fmaxf(m[i], mx[i]);
            al[i] = exp2f(m[i] - mnew);
            m[i] = mnew;
            l[i] *= al[i];
        }
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const float p0 = exp2f(s[j][0] - m[0]), p1 = exp2f(s[j][1] - m[0]);
            const float p2 = exp2f(s[j][2] - m[1]), p3 = exp2f(s[j][3] - m[1]);
            l[0] += p0 + p1;
            l[1] += p2 + p3;
            __nv_bfloat162 lo = __floats2bfloat162_rn(p0, p1), hi = __floats2bfloat162_rn(p2, p3);
            pk[j >> 1][(j & 1) * 2] = *reinterpret_cast<uint32_t *>(&lo);
            pk[j >> 1][(j & 1) * 2 + 1] = *reinterpret_cast<uint32_t *>(&hi);
        }
        /* P and the factors to shared memory once warpgroup 1 is done with the last ones. */
        if (t > 0) {
            ka_bar_sync(KA_BAR_PFREE);
        }
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const int c = j * 8 + (lane & 3) * 2;
            *reinterpret_cast<uint32_t *>(&sm->p[ka_swz(h0, c)]) = pk[j >> 1][(j & 1) * 2];
            *reinterpret_cast<uint32_t *>(&sm->p[ka_swz(h0 + 8, c)]) = pk[j >> 1][(j & 1) * 2 + 1];
        }
        if ((lane & 3) == 0) {
            sm->alpha[h0] = al[0];
            sm->alpha[h0 + 8] = al[1];
        }
        ka_fence_async();
        ka_bar_arrive(KA_BAR_PREADY);

        /* O[:, 0:256] = alpha O + P V, then S of tile t+1 behind it. */
        ka_scale_acc(acc, al[0], al[1]);
        const uint32_t vb = ka_smem_addr(sm->k[t & 1]);
        ka_wg_fence();
#pragma unroll
        for (int kk = 0; kk < KA_BN / 16; kk++) {
            ka_wgmma_64x256_rs(acc, pk[kk], ka_desc_mn(vb + kk * 16 * 128));
        }
        ka_wg_commit();
        if (t + 1 < n_tiles) {
            const int nb = (t + 1) & 1;
            ka_mbar_wait(&sm->full[nb], ((t + 1) >> 1) & 1);
            ka_fence_async();
            const uint32_t kb = ka_opaque(ka_smem_addr(sm->k[nb]));
            ka_wg_fence();
            ka_ws_qk<0, 12>(s, ka_opaque(qa), kb);
            ka_wg_commit();
            ka_wg_wait<1>(); /* P V of tile t is done: its buffer is free on this side */
            if (t + 2 < n_tiles) {
                ka_bar_arrive(KA_BAR_KFREE);
            }
            ka_ws_qk<12, KA_DQK / 16>(s, ka_opaque(qa), kb);
            ka_wg_commit();
        }
        ka_wg_wait<0>();
    }

    /* The row sums are spread over each quad. */
#pragma unroll
    for (int i = 0; i < 2; i++) {
        l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
        l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
    }
    const float inv0 = 1.0f / l[0], inv1 = 1.0f / l[1];
    if ((lane & 3) == 0) {
        sm->inv_l[h0] = inv0;
        sm->inv_l[h0 + 8] = inv1;
        lse[head0 + h0] = m[0] * 0.69314718056f + logf(l[0]);
        lse[head0 + h0 + 8] = m[1] * 0.69314718056f + logf(l[1]);
    }
    ka_bar_arrive(KA_BAR_FINAL);
    ka_ws_store(acc, out, head0, h0, 0, inv0, inv1);
}

/* Warpgroup 1: the loads and O[:, 256:512]. */
__device__ __forceinline__ void ka_ws_wg1(ka_ws_smem *sm, const __nv_bfloat16 *q,
                                          const __nv_bfloat16 *const *rows, int n_rows, int pf,
                                          float *out, size_t head0)
{
    const int tid = threadIdx.x - 128, lane = tid & 31;
    const int h0 = (tid >> 5) * 16 + (lane >> 2);
    const int lr = tid >> 3, lc = tid & 7; /* rows lr + 16i, chunks lc + 8c */
    const int n_tiles = (n_rows + KA_BN - 1) / KA_BN;
    const __nv_bfloat16 *rp[4];

    /* Q, then tiles 0 and 1; tile 0's barrier also covers Q. */
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int h = i * 16 + lr;
        const __nv_bfloat16 *src = q + (head0 + h) * KA_DQK;
#pragma unroll
        for (int c = 0; c < KA_CH / 8; c++) {
            const int ch = c * 8 + lc;
            ka_cp16(&sm->q[ka_swz(h, ch * 8)], src + ch * 8);
        }
    }
    ka_ws_ptrs(rows, n_rows, 0, lr, rp);
    ka_ws_load(sm->k[0], rp, lr, lc, &sm->full[0]);
    if (n_tiles > 1) {
        ka_ws_ptrs(rows, n_rows, 1, lr, rp);
        ka_ws_load(sm->k[1], rp, lr, lc, &sm->full[1]);
    }
    if (n_tiles > 2) {
        ka_ws_ptrs(rows, n_rows, 2, lr, rp);
    }
    /* L2 prefetch: tiles 2 .. 1 + pf now, then tile t + 2 + pf when tile t + 2 is loaded. */
    const __nv_bfloat16 *pfp = NULL;
    if (pf > 0 && tid < KA_BN) {
        for (int t = 2; t < 2 + pf && t < n_tiles; t++) {
            const int gr = t * KA_BN + tid;
            ka_prefetch_row(rows[gr < n_rows ? gr : 0]);
        }
        const int gr = (2 + pf) * KA_BN + tid;
        pfp = rows[gr < n_rows ? gr : 0 /* unused past the end */];
    }
    __syncwarp();

    float acc[4][8][4];
    kn_zero(acc);
    const uint32_t pa = ka_smem_addr(sm->p);
    for (int t = 0; t < n_tiles; t++) {
        ka_bar_sync(KA_BAR_PREADY);
        ka_fence_async();
        ka_scale_acc(acc, sm->alpha[h0], sm->alpha[h0 + 8]);
        const uint32_t vb = ka_smem_addr(sm->k[t & 1]) + 4 * (64 * 128);
        ka_wg_fence();
#pragma unroll
        for (int kk = 0; kk < KA_BN / 16; kk++) {
            ka_wgmma_64x256_tb(acc, ka_desc(pa + kk * 32), ka_desc_mn(vb + kk * 16 * 128));
        }
        ka_wg_commit();
        ka_wg_wait<0>();
        if (t + 2 < n_tiles) {
            /* Both warpgroups are done with buffer t&1: tile t+2 goes there. */
            ka_bar_sync(KA_BAR_KFREE);
            ka_ws_load(sm->k[t & 1], rp, lr, lc, &sm->full[t & 1]);
            if (t + 3 < n_tiles) {
                ka_ws_ptrs(rows, n_rows, t + 3, lr, rp);
            }
            if (pf > 0 && tid < KA_BN && t + 2 + pf < n_tiles) {
                ka_prefetch_row(pfp);
                const int gr = (t + 3 + pf) * KA_BN + tid;
                pfp = rows[gr < n_rows ? gr : 0];
            }
            __syncwarp();
        }
        if (t + 1 < n_tiles) {
            ka_bar_arrive(KA_BAR_PFREE);
        }
    }
    ka_bar_sync(KA_BAR_FINAL);
    ka_ws_store(acc, out, head0, h0, 256, sm->inv_l[h0], sm->inv_l[h0 + 8]);
}
#endif

__global__ void __launch_bounds__(KA_THREADS, 1)
    ka_ws_kernel(const __nv_bfloat16 *q, int n_heads, const __nv_bfloat16 *const *rows_all,
                 int n_rows, float scale_log2, int pf, float *out, float *lse)
{
    extern __shared__ __align__(128) unsigned char ka_raw[];
    const size_t head0 = (size_t)blockIdx.y * n_heads + (size_t)blockIdx.x * KA_HG;
    const __nv_bfloat16 *const *rows = rows_all + (size_t)blockIdx.y * n_rows;
    if (n_rows == 0) {
        ka_write_empty(out, lse, head0);
        return;
    }
#if KA_WGMMA
    ka_ws_smem *sm = reinterpret_cast<ka_ws_smem *>(ka_smem_base(ka_raw));
    if (threadIdx.x < 2) {
        asm volatile(
            "mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(ka_smem_addr(&sm->full[threadIdx.x])),
            "r"(128)
            : "memory");
        ka_fence_async();
    }
    __syncthreads();
    if (threadIdx.x < 128) {
        ka_ws_wg0(sm, n_rows, scale_log2, out, lse, head0);
    } else {
        ka_ws_wg1(sm, q, rows, n_rows, pf, out, head0);
    }
#else
    (void)pf;
    ka_serial_body(reinterpret_cast<ka_smem *>(ka_smem_base(ka_raw)), q, rows, n_rows, scale_log2,
                   out, lse, head0);
#endif
}

extern "C" st_status_t st_cuda_sparse_attn_bf16(const uint16_t *q, int n_batch, int n_heads,
                                                const uint16_t *const *rows, int n_rows,
                                                float scale, float *out, float *lse, void *stream)
{
    if (!q || !out || !lse || n_batch <= 0 || n_heads <= 0 || n_heads % KA_HG != 0 || n_rows < 0 ||
        (n_rows > 0 && !rows)) {
        return ST_ERR_INVALID;
    }
    const size_t bytes =
        sizeof(ka_smem) > sizeof(ka_ws_smem) ? sizeof(ka_smem) : sizeof(ka_ws_smem);
    const int smem = (int)bytes + 1024;
    dim3 grid(n_heads / KA_HG, n_batch);
    const __nv_bfloat16 *qb = reinterpret_cast<const __nv_bfloat16 *>(q);
    const __nv_bfloat16 *const *rb = reinterpret_cast<const __nv_bfloat16 *const *>(rows);
    const float scale_log2 = scale * 1.4426950409f;
    if (kn_variant_is("STRATA_KN_ATTN", "serial")) {
        cudaFuncSetAttribute(ka_sparse_attn_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             smem);
        ka_sparse_attn_kernel<<<grid, KA_THREADS, smem, KN_STREAM(stream)>>>(
            qb, n_heads, rb, n_rows, scale_log2, out, lse);
    } else {
        /* STRATA_KN_ATTN_PF=n: the rows of tile t+2+n are prefetched into L2 as tile t+2 is
         * loaded (0, the default: none). */
        const char *pfv = getenv("STRATA_KN_ATTN_PF");
        int pf = pfv ? atoi(pfv) : KA_PF_DEFAULT;
        pf = pf < 0 ? 0 : pf > 8 ? 8 : pf;
        cudaFuncSetAttribute(ka_ws_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        ka_ws_kernel<<<grid, KA_THREADS, smem, KN_STREAM(stream)>>>(qb, n_heads, rb, n_rows,
                                                                    scale_log2, pf, out, lse);
    }
    return kn_launch_status("sparse_attn_bf16");
}

__global__ void kn_lse_merge_kernel(float *out_a, float *lse_a, const float *out_b,
                                    const float *lse_b, int d_v)
{
    const int h = blockIdx.x;
    float la = lse_a[h], lb = lse_b[h];
    float wa, wb, l;
    if (lb == -INFINITY) {
        return;
    }
    if (la == -INFINITY) {
        wa = 0.0f, wb = 1.0f, l = lb;
    } else {
        float mx = fmaxf(la, lb);
        float ea = expf(la - mx), eb = expf(lb - mx);
        wa = ea / (ea + eb), wb = eb / (ea + eb), l = mx + logf(ea + eb);
    }
    float *oa = out_a + (size_t)h * d_v;
    const float *ob = out_b + (size_t)h * d_v;
    for (int c = threadIdx.x; c < d_v; c += blockDim.x) {
        oa[c] = la == -INFINITY ? ob[c] : wa * oa[c] + wb * ob[c];
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        lse_a[h] = l;
    }
}

extern "C" st_status_t st_cuda_lse_merge(float *out_a, float *lse_a, const float *out_b,
                                         const float *lse_b, int n_heads, int d_v, void *stream)
{
    if (!out_a || !lse_a || !out_b || !lse_b || n_heads <= 0 || d_v <= 0) {
        return ST_ERR_INVALID;
    }
    kn_lse_merge_kernel<<<n_heads, 128, 0, KN_STREAM(stream)>>>(out_a, lse_a, out_b, lse_b, d_v);
    return kn_launch_status("lse_merge");
}
