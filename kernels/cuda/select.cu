/*
 * select.cu - exact two-stage top-k of one query's fp8 indexer scores on the
 * GPU, with no host round trip:
 *   1. bounds of every block (indexer.cu's kernel);
 *   2. seed: the blocks whose bound ranks in the top n_seed (radix select);
 *      their rows are scored and appended to a candidate list;
 *   3. tau = the k-th best seed score, a lower bound on the true k-th score;
 *   4. every other block whose bound is >= tau is scored and appended (a block
 *      whose bound is below tau cannot hold a top-k row);
 *   5. the top k of the candidates (radix select, then a gather).
 * Radix select: 4 passes of 8 bits over order-preserving keys of the floats;
 * each pass is one kernel whose last CTA to finish picks the digit.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>

#include "kn_cuda.h"
#include "kn_fp8.cuh"

#define KS_GRID    264
#define KS_THREADS 256

/* Larger float, larger key. */
__device__ __forceinline__ uint32_t ks_key(float f)
{
    uint32_t u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

typedef struct ks_state {
    uint32_t hist[256];
    uint32_t prefix, mask; /* key bits fixed so far */
    int k_left;            /* rank still wanted among keys that match the prefix */
    unsigned int done;     /* CTAs finished in this pass */
    int n_cand;            /* candidates appended */
    int n_taken_eq;        /* gather: ties taken */
    int n_out;             /* gather: rows written */
} ks_state_t;

/* One radix pass over vals[0..n) (n = *n_dev when n_dev is set). */
__global__ void ks_radix_pass(const float *vals, int n_host, const int *n_dev, int k, int shift,
                              ks_state_t *st)
{
    __shared__ uint32_t h[256];
    __shared__ bool last;
    const int n = n_dev ? *n_dev : n_host;
    for (int i = threadIdx.x; i < 256; i += blockDim.x) {
        h[i] = 0;
    }
    __syncthreads();
    const uint32_t prefix = st->prefix, mask = st->mask;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        uint32_t key = ks_key(vals[i]);
        if ((key & mask) == prefix) {
            atomicAdd(&h[(key >> shift) & 0xff], 1u);
        }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < 256; i += blockDim.x) {
        if (h[i]) {
            atomicAdd(&st->hist[i], h[i]);
        }
    }
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        last = atomicAdd(&st->done, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!last || threadIdx.x != 0) {
        return;
    }
    __threadfence();
    if (shift == 24 && n < k) {
        /* Fewer values than the rank: the threshold is the lowest key, every value passes. */
        st->prefix = 0;
        st->mask = 0xffffffffu;
        st->k_left = 0;
    }
    if (st->mask == 0xffffffffu) {
        for (int i = 0; i < 256; i++) {
            st->hist[i] = 0;
        }
        st->done = 0;
        return;
    }
    int want = shift == 24 ? k : st->k_left;
    uint32_t cum = 0;
    int d = 255;
    for (; d > 0; d--) {
        uint32_t c = atomicAdd(&st->hist[d], 0u);
        if (cum + c >= (uint32_t)want) {
            break;
        }
        cum += c;
    }
    st->k_left = want - (int)cum;
    st->prefix = prefix | ((uint32_t)d << shift);
    st->mask = mask | (0xffu << shift);
    for (int i = 0; i < 256; i++) {
        st->hist[i] = 0;
    }
    st->done = 0;
}

/* After 4 passes st->prefix is the key of the k-th largest value. */
static st_status_t ks_select(const float *vals, int n_host, const int *n_dev, int k, ks_state_t *st,
                             cudaStream_t s)
{
    for (int shift = 24; shift >= 0; shift -= 8) {
        ks_radix_pass<<<KS_GRID, KS_THREADS, 0, s>>>(vals, n_host, n_dev, k, shift, st);
    }
    return kn_launch_status("radix_select");
}

__global__ void ks_reset(ks_state_t *st, int keep_cand)
{
    if (threadIdx.x == 0) {
        st->prefix = 0;
        st->mask = 0;
        st->k_left = 0;
        st->done = 0;
        if (!keep_cand) {
            st->n_cand = 0;
        }
        st->n_taken_eq = 0;
        st->n_out = 0;
    }
    for (int i = threadIdx.x; i < 256; i += blockDim.x) {
        st->hist[i] = 0;
    }
}

/* Copies the selected key threshold into *thr (as a key) before the state is reused. */
__global__ void ks_save_threshold(ks_state_t *st, uint32_t *thr)
{
    *thr = st->prefix;
}

/*
 * Scores the rows of every block that passes the gate and appends them.
 * stage 0: bound key >= lo_key (the seed); stage 1: bound key >= lo_key and < hi_key.
 */
__global__ void __launch_bounds__(128)
    ks_score_blocks(const float *q, const float *w, int n_heads, const uint8_t *keys8,
                    const float *key_scale, int n_keys, int block_rows, const float *bound,
                    const uint32_t *lo_key, const uint32_t *hi_key, float *cand_s, int32_t *cand_i,
                    ks_state_t *st)
{
    const int lane = threadIdx.x & 31;
    const uint32_t lo = *lo_key, hi = hi_key ? *hi_key : 0xffffffffu;
    const int inclusive_hi = hi_key == NULL;
    uint32_t bq[8][8][2];
    float wl[8][2];
    bool loaded = false;
    const int n_groups = (n_keys + 15) / 16;
    const int warp_id = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int n_warps = (gridDim.x * blockDim.x) >> 5;
    for (int grp = warp_id; grp < n_groups; grp += n_warps) {
        uint32_t bk = ks_key(bound[(grp * 16) / block_rows]);
        if (bk < lo || (inclusive_hi ? false : bk >= hi)) {
            continue;
        }
        if (!loaded) {
            kf_load_query(q, w, n_heads, lane, bq, wl);
            loaded = true;
        }
        float s0, s1;
        kf_score16(keys8, key_scale, n_keys, grp * 16, lane, bq, wl, &s0, &s1);
        int base = 0;
        if (lane == 0) {
            base = atomicAdd(&st->n_cand, 16);
        }
        base = __shfl_sync(0xffffffffu, base, 0);
        if ((lane & 3) == 0) {
            int r0 = grp * 16 + (lane >> 2), r1 = r0 + 8;
            int o0 = base + (lane >> 2), o1 = o0 + 8;
            cand_s[o0] = r0 < n_keys ? s0 : -INFINITY;
            cand_i[o0] = r0 < n_keys ? r0 : -1;
            cand_s[o1] = r1 < n_keys ? s1 : -INFINITY;
            cand_i[o1] = r1 < n_keys ? r1 : -1;
        }
    }
}

/* Writes the candidates above the threshold, and as many equal to it as the rank asks. */
__global__ void ks_gather(const float *cand_s, const int32_t *cand_i, ks_state_t *st, int k,
                          int32_t *idx, float *score)
{
    const int n = st->n_cand;
    const uint32_t thr = st->prefix;
    const int eq_wanted = st->k_left;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        if (cand_i[i] < 0) {
            continue;
        }
        uint32_t key = ks_key(cand_s[i]);
        bool take = key > thr;
        if (key == thr) {
            take = atomicAdd(&st->n_taken_eq, 1) < eq_wanted;
        }
        if (take) {
            int o = atomicAdd(&st->n_out, 1);
            if (o < k) {
                idx[o] = cand_i[i];
                if (score) {
                    score[o] = cand_s[i];
                }
            }
        }
    }
}

extern "C" size_t st_cuda_indexer_topk_workspace(int n_keys, int block_rows)
{
    if (n_keys <= 0 || block_rows <= 0) {
        return 0;
    }
    size_t nb = (size_t)(n_keys + block_rows - 1) / block_rows;
    size_t nc = (size_t)n_keys + 16 * ((size_t)block_rows / 16 + 2) + nb * 16;
    return 256 + sizeof(ks_state_t) + nb * sizeof(float) + nc * (sizeof(float) + sizeof(int32_t));
}

extern "C" st_status_t st_cuda_indexer_topk_fp8(const float *q, const float *w, int n_heads,
                                                const uint8_t *keys8, const float *key_scale,
                                                const float *summary, int n_keys, int block_rows,
                                                int k, void *workspace, size_t workspace_bytes,
                                                int32_t *idx, float *score, void *stream)
{
    if (!q || !w || !keys8 || !key_scale || !summary || !workspace || !idx || n_heads <= 0 ||
        n_heads > KF_HEADS || n_keys <= 0 || block_rows <= 0 || block_rows % 16 != 0 || k <= 0 ||
        k > n_keys || workspace_bytes < st_cuda_indexer_topk_workspace(n_keys, block_rows)) {
        return ST_ERR_INVALID;
    }
    cudaStream_t s = KN_STREAM(stream);
    const int nb = (n_keys + block_rows - 1) / block_rows;
    unsigned char *p = (unsigned char *)workspace;
    uint32_t *thr = (uint32_t *)p; /* [0] seed bound key, [1] tau key */
    ks_state_t *st = (ks_state_t *)(p + 256);
    float *bound = (float *)(st + 1);
    float *cand_s = bound + nb;
    size_t nc = (size_t)n_keys + 16 * ((size_t)block_rows / 16 + 2) + (size_t)nb * 16;
    int32_t *cand_i = (int32_t *)(cand_s + nc);
    st_status_t rc;

    rc = st_cuda_block_bounds(q, w, n_heads, KF_DIM, summary, nb, bound, stream);
    if (rc != ST_OK) {
        return rc;
    }
    /* Seed: blocks whose bound ranks among the best n_seed. */
    int n_seed = (k + block_rows - 1) / block_rows + 1;
    n_seed = n_seed < nb ? n_seed : nb;
    ks_reset<<<1, 256, 0, s>>>(st, 0);
    ks_select(bound, nb, NULL, n_seed, st, s);
    ks_save_threshold<<<1, 1, 0, s>>>(st, &thr[0]);
    ks_score_blocks<<<KS_GRID, 128, 0, s>>>(q, w, n_heads, keys8, key_scale, n_keys, block_rows,
                                            bound, &thr[0], NULL, cand_s, cand_i, st);
    /* tau: the k-th best seed score (-inf ranks lowest when there are fewer than k). */
    ks_reset<<<1, 256, 0, s>>>(st, 1);
    ks_select(cand_s, 0, &st->n_cand, k, st, s);
    ks_save_threshold<<<1, 1, 0, s>>>(st, &thr[1]);
    ks_score_blocks<<<KS_GRID * 4, 128, 0, s>>>(q, w, n_heads, keys8, key_scale, n_keys, block_rows,
                                                bound, &thr[1], &thr[0], cand_s, cand_i, st);
    /* The k best candidates. */
    ks_reset<<<1, 256, 0, s>>>(st, 1);
    ks_select(cand_s, 0, &st->n_cand, k, st, s);
    ks_gather<<<KS_GRID, KS_THREADS, 0, s>>>(cand_s, cand_i, st, k, idx, score);
    return kn_launch_status("indexer_topk_fp8");
}
