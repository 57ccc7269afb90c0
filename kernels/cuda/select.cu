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
    int n_list;            /* blocks listed so far; candidate rows of entry i: i*block_rows.. */
    int list_start;        /* first entry of the list that the next scoring pass takes */
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
    /* Float keys crowd into a few digits: lanes with the same digit add once (warp-aggregated). */
    const int stride = gridDim.x * blockDim.x;
    const int lane = threadIdx.x & 31;
    for (int base = blockIdx.x * blockDim.x; base < n; base += stride) {
        int i = base + threadIdx.x;
        bool hit = false;
        uint32_t digit = 0;
        if (i < n) {
            uint32_t key = ks_key(vals[i]);
            hit = (key & mask) == prefix;
            digit = (key >> shift) & 0xff;
        }
        unsigned voters = __ballot_sync(0xffffffffu, hit);
        if (hit) {
            unsigned same = __match_any_sync(voters, digit);
            if (lane == __ffs(same) - 1) {
                atomicAdd(&h[digit], (uint32_t)__popc(same));
            }
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
    if (!last) {
        return;
    }
    /* The last CTA: take the global histogram (and clear it for the next pass), pick the digit. */
    __threadfence();
    for (int i = threadIdx.x; i < 256; i += blockDim.x) {
        h[i] = atomicExch(&st->hist[i], 0u);
    }
    __syncthreads();
    /* Warp 0 finds the digit: lane l sums digits 255-8l-7 .. 255-8l, a prefix sum over the
     * lanes (highest digits first) picks the lane, which scans its eight. */
    if (threadIdx.x >= 32) {
        return;
    }
    if (threadIdx.x == 0) {
        st->done = 0;
    }
    if (shift == 24 && n < k) {
        /* Fewer values than the rank: the threshold is the lowest key, every value passes. */
        if (threadIdx.x == 0) {
            st->prefix = 0;
            st->mask = 0xffffffffu;
            st->k_left = 0;
        }
        return;
    }
    if (mask == 0xffffffffu) {
        return;
    }
    const int want = shift == 24 ? k : st->k_left;
    const int hi = 255 - 8 * lane, lo = hi - 7;
    uint32_t part = 0;
    for (int d = lo; d <= hi; d++) {
        part += h[d];
    }
    uint32_t incl = part;
    for (int o = 1; o < 32; o <<= 1) {
        uint32_t v = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) {
            incl += v;
        }
    }
    unsigned hit = __ballot_sync(0xffffffffu, incl >= (uint32_t)want);
    const int first = hit ? __ffs(hit) - 1 : 31;
    if (lane == first) {
        uint32_t cum = incl - part;
        int d = hi;
        for (; d > lo; d--) {
            if (cum + h[d] >= (uint32_t)want) {
                break;
            }
            cum += h[d];
        }
        st->k_left = want - (int)cum;
        st->prefix = prefix | ((uint32_t)d << shift);
        st->mask = mask | (0xffu << shift);
    }
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
            st->n_list = 0;
            st->list_start = 0;
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
    st->list_start = st->n_list; /* the next list pass appends after what is scored */
}

/* Lists the blocks whose bound key is >= *lo_key (and < *hi_key when given). */
__global__ void ks_list_blocks(const float *bound, int n_blocks, const uint32_t *lo_key,
                               const uint32_t *hi_key, int32_t *list, ks_state_t *st)
{
    const int b = blockIdx.x * blockDim.x + threadIdx.x, lane = threadIdx.x & 31;
    bool take = false;
    if (b < n_blocks) {
        uint32_t bk = ks_key(bound[b]);
        take = bk >= *lo_key && (hi_key == NULL || bk < *hi_key);
    }
    unsigned m = __ballot_sync(0xffffffffu, take);
    int base = 0;
    if (lane == 0 && m) {
        base = atomicAdd(&st->n_list, __popc(m));
    }
    base = __shfl_sync(0xffffffffu, base, 0);
    if (take) {
        list[base + __popc(m & ((1u << lane) - 1))] = b;
    }
}

/*
 * Scores the rows of the list entries from list_start on (block_rows / 16 groups
 * each); entry i's rows go to candidates i*block_rows .., so no atomics are needed.
 */
__global__ void __launch_bounds__(128, 2)
    ks_score_blocks(const float *q, const float *w, int n_heads, const uint8_t *keys8,
                    const float *key_scale, int n_keys, int block_rows, const int32_t *list,
                    float *cand_s, int32_t *cand_i, ks_state_t *st)
{
    __shared__ kf_stage_t ring[4][KF_STAGES];
    const int lane = threadIdx.x & 31, gpb = block_rows / 16;
    const int first = st->list_start * gpb, n_items = st->n_list * gpb;
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        st->n_cand = st->n_list * block_rows;
    }
    const int warp_id = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int n_warps = (gridDim.x * blockDim.x) >> 5;
    if (first + warp_id >= n_items) {
        return;
    }
    uint32_t bq[8][8][2];
    float wl[8][2];
    kf_load_query(q, w, n_heads, lane, bq, wl);
    kf_stream(
        keys8, key_scale, n_keys, first + warp_id, n_warps, n_items,
        [&](int i) { return __ldg(list + i / gpb) * gpb + i % gpb; },
        [&](int i, float s0, float s1) {
            if ((lane & 3) == 0) {
                int g = __ldg(list + i / gpb) * gpb + i % gpb;
                int r0 = g * 16 + (lane >> 2), r1 = r0 + 8;
                int o0 = i * 16 + (lane >> 2), o1 = o0 + 8;
                cand_s[o0] = r0 < n_keys ? s0 : -INFINITY;
                cand_i[o0] = r0 < n_keys ? r0 : -1;
                cand_s[o1] = r1 < n_keys ? s1 : -INFINITY;
                cand_i[o1] = r1 < n_keys ? r1 : -1;
            }
        },
        ring[threadIdx.x >> 5], lane, bq, wl);
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
    return 256 + sizeof(ks_state_t) + nb * (sizeof(float) + sizeof(int32_t)) +
           nc * (sizeof(float) + sizeof(int32_t));
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
    int32_t *list = cand_i + nc;
    const int lb = (nb + 255) / 256;
    st_status_t rc;

    rc = st_cuda_block_bounds(q, w, n_heads, KF_DIM, summary, nb, bound, stream);
    if (rc != ST_OK) {
        return rc;
    }
    /* Seed: blocks whose bound ranks among the best n_seed. */
    int n_seed = 4 * ((k + block_rows - 1) / block_rows); /* tau near the median of the seed */
    n_seed = n_seed < nb ? n_seed : nb;
    ks_reset<<<1, 256, 0, s>>>(st, 0);
    ks_select(bound, nb, NULL, n_seed, st, s);
    ks_save_threshold<<<1, 1, 0, s>>>(st, &thr[0]);
    ks_list_blocks<<<lb, 256, 0, s>>>(bound, nb, &thr[0], NULL, list, st);
    ks_score_blocks<<<KS_GRID, 128, 0, s>>>(q, w, n_heads, keys8, key_scale, n_keys, block_rows,
                                            list, cand_s, cand_i, st);
    /* tau: the k-th best seed score (-inf ranks lowest when there are fewer than k). */
    ks_reset<<<1, 256, 0, s>>>(st, 1);
    ks_select(cand_s, 0, &st->n_cand, k, st, s);
    ks_save_threshold<<<1, 1, 0, s>>>(st, &thr[1]);
    ks_list_blocks<<<lb, 256, 0, s>>>(bound, nb, &thr[1], &thr[0], list, st);
    ks_score_blocks<<<KS_GRID, 128, 0, s>>>(q, w, n_heads, keys8, key_scale, n_keys, block_rows,
                                            list, cand_s, cand_i, st);
    /* The k best candidates. */
    ks_reset<<<1, 256, 0, s>>>(st, 1);
    ks_select(cand_s, 0, &st->n_cand, k, st, s);
    ks_gather<<<KS_GRID, KS_THREADS, 0, s>>>(cand_s, cand_i, st, k, idx, score);
    return kn_launch_status("indexer_topk_fp8");
}
