/*
 * attn.cu - sparse decode attention partial (MLA in MQA mode) on tensor cores,
 * and the LSE merge.
 *
 * One CTA of 8 warps takes one batch entry and 64 heads and walks the selected
 * rows in tiles of 32, double-buffered in shared memory by cp.async (each row
 * fetched through its own pointer). Per tile: S = Q K^T with mma.sync
 * m16n8k16 bf16 (each warp 16 heads x 16 rows), an online softmax in the
 * log2 domain, P (bf16) to shared memory, then O += P V (each warp all 64
 * heads x 64 of the 512 value columns, accumulated in fp32 registers).
 */
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>

#include "kn_cuda.h"

#define KA_DQK     576
#define KA_DV      512
#define KA_HG      64           /* heads per CTA */
#define KA_BN      32           /* rows per tile */
#define KA_LD      (KA_DQK + 8) /* padded row length in shared memory (bf16) */
#define KA_PLD     (KA_BN + 8)  /* padded P row length */
#define KA_THREADS 256

struct ka_smem {
    __nv_bfloat16 q[KA_HG * KA_LD];
    __nv_bfloat16 k[2][KA_BN * KA_LD];
    __nv_bfloat16 p[KA_HG * KA_PLD];
    float red_max[2][KA_HG];
    float red_sum[2][KA_HG];
    float m[2][KA_HG];
    float l[KA_HG];
};

__device__ __forceinline__ uint32_t ka_smem_addr(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void ka_ldm_x4(uint32_t *r, const void *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(ka_smem_addr(p)));
}

__device__ __forceinline__ void ka_ldm_x4_t(uint32_t *r, const void *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(ka_smem_addr(p)));
}

__device__ __forceinline__ void ka_mma(float *c, const uint32_t *a, uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void ka_cp16(void *dst, const void *src)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(ka_smem_addr(dst)), "l"(src));
}

/* Issues the copy of tile t (rows t*32 ..) into buffer buf; rows past the end repeat row 0. */
__device__ __forceinline__ void ka_load_tile(ka_smem *sm, int buf, const __nv_bfloat16 *const *rows,
                                             int n_rows, int t)
{
    for (int i = threadIdx.x; i < KA_BN * (KA_DQK / 8); i += KA_THREADS) {
        int r = i / (KA_DQK / 8), ch = i % (KA_DQK / 8);
        int gr = t * KA_BN + r;
        const __nv_bfloat16 *src = rows[gr < n_rows ? gr : 0] + ch * 8;
        ka_cp16(&sm->k[buf][r * KA_LD + ch * 8], src);
    }
    asm volatile("cp.async.commit_group;\n" ::);
}

__global__ void __launch_bounds__(KA_THREADS, 1)
    ka_sparse_attn_kernel(const __nv_bfloat16 *q, int n_heads, const __nv_bfloat16 *const *rows_all,
                          int n_rows, float scale_log2, float *out, float *lse)
{
    extern __shared__ __align__(16) unsigned char ka_raw[];
    ka_smem *sm = reinterpret_cast<ka_smem *>(ka_raw);
    const int b = blockIdx.y, hg = blockIdx.x, tid = threadIdx.x;
    const int warp = tid >> 5, lane = tid & 31;
    const __nv_bfloat16 *const *rows = rows_all + (size_t)b * n_rows;
    const size_t head0 = (size_t)b * n_heads + (size_t)hg * KA_HG;

    if (n_rows == 0) {
        for (int i = tid; i < KA_HG * KA_DV; i += KA_THREADS) {
            out[head0 * KA_DV + i] = 0.0f;
        }
        if (tid < KA_HG) {
            lse[head0 + tid] = -INFINITY;
        }
        return;
    }
    for (int i = tid; i < KA_HG * (KA_DQK / 8); i += KA_THREADS) {
        int h = i / (KA_DQK / 8), ch = i % (KA_DQK / 8);
        *reinterpret_cast<uint4 *>(&sm->q[h * KA_LD + ch * 8]) =
            *reinterpret_cast<const uint4 *>(q + (head0 + h) * KA_DQK + ch * 8);
    }
    if (tid < KA_HG) {
        sm->m[0][tid] = -INFINITY;
        sm->l[tid] = 0.0f;
    }
    ka_load_tile(sm, 0, rows, n_rows, 0);

    const int wm = warp & 3, wn = warp >> 2; /* S phase: heads wm*16.., rows wn*16.. */
    float acc[4][8][4];                      /* PV phase: 64 heads x columns warp*64.. */
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                acc[i][j][e] = 0.0f;

    const int n_tiles = (n_rows + KA_BN - 1) / KA_BN;
    int par = 0;
    for (int t = 0; t < n_tiles; t++) {
        const int buf = t & 1;
        asm volatile("cp.async.wait_all;\n" ::);
        __syncthreads();
        if (t + 1 < n_tiles) {
            ka_load_tile(sm, buf ^ 1, rows, n_rows, t + 1);
        }
        const __nv_bfloat16 *kt = sm->k[buf];

        /* S = Q K^T for 16 heads x 16 rows. */
        float s[2][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}};
        const __nv_bfloat16 *qa = &sm->q[(wm * 16 + (lane & 15)) * KA_LD + (lane >> 4) * 8];
        const __nv_bfloat16 *kb =
            &kt[(wn * 16 + (lane & 7) + ((lane >> 4) << 3)) * KA_LD + ((lane >> 3) & 1) * 8];
#pragma unroll 4
        for (int k0 = 0; k0 < KA_DQK; k0 += 16) {
            uint32_t a[4], bb[4];
            ka_ldm_x4(a, qa + k0);
            ka_ldm_x4(bb, kb + k0);
            ka_mma(s[0], a, bb[0], bb[1]);
            ka_mma(s[1], a, bb[2], bb[3]);
        }
        /* Scale to the log2 domain and mask rows past the end. */
        const int valid = n_rows - t * KA_BN;
        float mx[2] = {-INFINITY, -INFINITY}; /* heads h0 and h0+8 */
#pragma unroll
        for (int nt = 0; nt < 2; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int r = wn * 16 + nt * 8 + (lane & 3) * 2 + (e & 1);
                float v = r < valid ? s[nt][e] * scale_log2 : -INFINITY;
                s[nt][e] = v;
                mx[e >> 1] = fmaxf(mx[e >> 1], v);
            }
#pragma unroll
        for (int i = 0; i < 2; i++) {
            mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
            mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));
        }
        const int h0 = wm * 16 + (lane >> 2);
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
            for (int nt = 0; nt < 2; nt++) {
                float p0 = exp2f(s[nt][2 * i] - mnew), p1 = exp2f(s[nt][2 * i + 1] - mnew);
                sum[i] += p0 + p1;
                int r = wn * 16 + nt * 8 + (lane & 3) * 2;
                *reinterpret_cast<__nv_bfloat162 *>(&sm->p[h * KA_PLD + r]) =
                    __floats2bfloat162_rn(p0, p1);
            }
            sum[i] += __shfl_xor_sync(0xffffffffu, sum[i], 1);
            sum[i] += __shfl_xor_sync(0xffffffffu, sum[i], 2);
        }
        if ((lane & 3) == 0) {
            sm->red_sum[wn][h0] = sum[0];
            sm->red_sum[wn][h0 + 8] = sum[1];
        }
        __syncthreads();
        /* Running max and sum, double-buffered by parity so that readers below see the old m. */
        if (tid < KA_HG) {
            float mold = sm->m[par][tid];
            float mnew = fmaxf(mold, fmaxf(sm->red_max[0][tid], sm->red_max[1][tid]));
            float alpha = exp2f(mold - mnew);
            sm->l[tid] = sm->l[tid] * alpha + sm->red_sum[0][tid] + sm->red_sum[1][tid];
            sm->m[par ^ 1][tid] = mnew;
        }
        /* O = alpha O + P V for 64 heads x 64 columns. */
#pragma unroll
        for (int mi = 0; mi < 4; mi++) {
#pragma unroll
            for (int half = 0; half < 2; half++) {
                int h = mi * 16 + (lane >> 2) + half * 8;
                float mold = sm->m[par][h];
                float mnew = fmaxf(mold, fmaxf(sm->red_max[0][h], sm->red_max[1][h]));
                float alpha = exp2f(mold - mnew);
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
                ka_ldm_x4(a[mi], &sm->p[(mi * 16 + (lane & 15)) * KA_PLD + k0 + (lane >> 4) * 8]);
            }
#pragma unroll
            for (int nj = 0; nj < 8; nj += 2) {
                uint32_t bb[4];
                int col = warp * 64 + nj * 8 + (lane >> 4) * 8;
                ka_ldm_x4_t(bb, &kt[(k0 + (lane & 7) + ((lane >> 3) & 1) * 8) * KA_LD + col]);
#pragma unroll
                for (int mi = 0; mi < 4; mi++) {
                    ka_mma(acc[mi][nj], a[mi], bb[0], bb[1]);
                    ka_mma(acc[mi][nj + 1], a[mi], bb[2], bb[3]);
                }
            }
        }
        par ^= 1;
    }
    __syncthreads();
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
    if (tid < KA_HG) {
        lse[head0 + tid] = sm->m[par][tid] * 0.69314718056f + logf(sm->l[tid]);
    }
}

extern "C" st_status_t st_cuda_sparse_attn_bf16(const uint16_t *q, int n_batch, int n_heads,
                                                const uint16_t *const *rows, int n_rows,
                                                float scale, float *out, float *lse, void *stream)
{
    if (!q || !out || !lse || n_batch <= 0 || n_heads <= 0 || n_heads % KA_HG != 0 || n_rows < 0 ||
        (n_rows > 0 && !rows)) {
        return ST_ERR_INVALID;
    }
    static int attr_set = 0;
    if (!attr_set) {
        cudaFuncSetAttribute(ka_sparse_attn_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)sizeof(ka_smem));
        attr_set = 1;
    }
    dim3 grid(n_heads / KA_HG, n_batch);
    ka_sparse_attn_kernel<<<grid, KA_THREADS, sizeof(ka_smem), KN_STREAM(stream)>>>(
        reinterpret_cast<const __nv_bfloat16 *>(q), n_heads,
        reinterpret_cast<const __nv_bfloat16 *const *>(rows), n_rows, scale * 1.4426950409f, out,
        lse);
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
