/*
 * select.cu - exact top-k of one query's fp8 indexer scores on the GPU, with no
 * host round trip, by one of two paths (ks_use_dense): the dense path (every
 * row scored, a radix select fused into the scorer and a compact candidate
 * list; D1..D4 below, the default), or the two-stage path in eight kernels:
 *   1. bounds of every block (indexer.cu);
 *   2. seed (one CTA): the n_seed-th best bound (radix select), and the list of
 *      the blocks whose bound is at least that;
 *   3. the seed blocks are scored into candidate slots (list entry i: rows
 *      i*block_rows..);
 *   4. tau (one CTA): the k-th best seed score, a lower bound on the true k-th
 *      score; the list of every other block whose bound is >= tau (a block
 *      whose bound is below tau cannot hold a top-k row); a histogram of the
 *      top 11 key bits of the seed rows >= tau;
 *   5. the other listed blocks are scored into the slots after the seed's;
 *      rows >= tau are counted in the histogram; the last CTA picks the first
 *      digit of the k-th best (only rows >= tau are counted: the k-th best of
 *      those is the k-th best of all, and the later digits may count any rows,
 *      since rows below tau rank below it);
 *   6, 7. the second (11 bits) and third (10 bits) digits over all slots;
 *   8. gather: the rows above the k-th key, and as many equal to it as the
 *      rank asks.
 * Keys are order-preserving uint32 images of the floats; an empty slot holds a
 * NaN whose key is 0, below every number, so it never matches a digit picked
 * from counted rows. Radix digits are 11, 11 and 10 bits, counted in shared
 * memory.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>

#include "kn_cuda.h"
#include "kn_fp8.cuh"

#define KS_GRID     264
#define KS_THREADS  256
#define KS_BINS     2048
#define KS_1CTA     1024 /* threads of the single-CTA kernels */
#define KS_1CTA_PER 16   /* values per thread per sweep in those (all loads first) */
#define KS_EMPTY    __uint_as_float(0xffffffffu) /* a NaN with key 0: an empty slot */

/* Larger float, larger key. */
__device__ __forceinline__ uint32_t ks_key(float f)
{
    uint32_t u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* Radix pass p (0, 1, 2): digit position and width. */
__device__ __forceinline__ int ks_shift(int p)
{
    return p == 0 ? 21 : (p == 1 ? 10 : 0);
}
__device__ __forceinline__ uint32_t ks_dmask(int p)
{
    return p == 2 ? 0x3ffu : 0x7ffu;
}

typedef struct ks_state {
    uint32_t hist[KS_BINS]; /* global histogram of the multi-CTA passes (zero between passes) */
    uint32_t prefix, mask;  /* key bits of the k-th best candidate fixed so far */
    int k_left;             /* rank still wanted among candidates that match the prefix */
    unsigned int done;      /* CTAs finished in this pass */
    int n_cand;             /* candidate slots: the seed's, then (after tau) all */
    int n_taken_eq;         /* gather: ties taken */
    int n_out;              /* gather: rows written */
    int n_list;     /* blocks listed so far; seed candidate rows of entry i: i*block_rows.. */
    int list_start; /* first entry of the list that the next scoring pass takes */
    int n_comp;     /* dense path: rows in the compact candidate list */
} ks_state_t;

/*
 * Adds 1 to h[digit] for the lanes with hit (all lanes of the warp call it). Float keys crowd
 * into few digits: when every hitting lane has the same digit, one lane adds them all; else
 * each adds its own (match.any, which would group any digits, is slow on a whole CTA).
 */
__device__ __forceinline__ void ks_count(uint32_t *h, bool hit, uint32_t digit, int lane)
{
    const unsigned voters = __ballot_sync(0xffffffffu, hit);
    if (voters == 0) {
        return;
    }
    const int leader = __ffs(voters) - 1;
    const uint32_t d0 = __shfl_sync(0xffffffffu, digit, leader);
    const unsigned same = __ballot_sync(0xffffffffu, hit && digit == d0);
    if (same == voters) {
        if (lane == leader) {
            atomicAdd(&h[d0], (uint32_t)__popc(voters));
        }
    } else if (hit) {
        atomicAdd(&h[digit], 1u);
    }
}

/* Clears the shared histogram h (nt threads, the CTA's); the caller's barrier follows. */
__device__ __forceinline__ void ks_hist_zero(uint32_t *h, int nt)
{
    for (int i = threadIdx.x; i < KS_BINS; i += nt) {
        h[i] = 0;
    }
}

/*
 * The whole CTA (any multiple of 32 threads up to 1024) finds, in the histogram h (shared),
 * the digit d, highest first, at which the count from the top reaches want: res[0] = d,
 * res[1] = want - (count above d); res[0] = -1 when the total is below want. scratch: 32
 * shared words. Ends with a barrier.
 */
__device__ void ks_pick(const uint32_t *h, uint32_t want, uint32_t *scratch, int *res)
{
    const int nt = blockDim.x, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int per = KS_BINS / nt, top = KS_BINS - 1 - tid * per;
    uint32_t part = 0;
    for (int i = 0; i < per; i++) {
        part += h[top - i];
    }
    uint32_t incl = part;
    for (int o = 1; o < 32; o <<= 1) {
        uint32_t v = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) {
            incl += v;
        }
    }
    if (lane == 31) {
        scratch[warp] = incl;
    }
    if (tid == 0) {
        res[0] = -1;
        res[1] = 0;
    }
    __syncthreads();
    if (warp == 0) {
        uint32_t x = lane < (nt >> 5) ? scratch[lane] : 0;
        for (int o = 1; o < 32; o <<= 1) {
            uint32_t v = __shfl_up_sync(0xffffffffu, x, o);
            if (lane >= o) {
                x += v;
            }
        }
        scratch[lane] = x;
    }
    __syncthreads();
    incl += warp > 0 ? scratch[warp - 1] : 0;
    const uint32_t excl = incl - part;
    if (excl < want && incl >= want) {
        uint32_t cum = excl;
        int d = top;
        for (int i = 0; i < per - 1; i++, d--) {
            if (cum + h[d] >= want) {
                break;
            }
            cum += h[d];
        }
        res[0] = d;
        res[1] = (int)(want - cum);
    }
    __syncthreads();
}

/*
 * One CTA of KS_1CTA threads: the key of the k-th largest of vals[0..n) in *thr and how many
 * values equal to it are among the k best in *k_left (both uniform). Fewer than k values: the
 * threshold is key 0, so that every value passes. h: KS_BINS shared words.
 */
__device__ void ks_cta_select(const float *vals, int n, int k, uint32_t *h, uint32_t *scratch,
                              int *res, uint32_t *thr, int *k_left)
{
    const int tid = threadIdx.x, lane = tid & 31;
    uint32_t prefix = 0, mask = 0;
    int want = k;
    if (n < k) {
        *thr = 0;
        *k_left = 0;
        return;
    }
    const bool resident = n <= KS_1CTA * KS_1CTA_PER; /* one sweep: load once for all passes */
    uint32_t key[KS_1CTA_PER];
    auto load = [&](int base) {
#pragma unroll
        for (int u = 0; u < KS_1CTA_PER; u++) {
            int i = base + u * KS_1CTA + tid;
            key[u] = i < n ? ks_key(vals[i]) : 0;
        }
    };
    if (resident) {
        load(0);
    }
    for (int p = 0; p < 3; p++) {
        const int shift = ks_shift(p);
        const uint32_t dm = ks_dmask(p);
        ks_hist_zero(h, KS_1CTA);
        __syncthreads();
        for (int base = 0; base < n; base += KS_1CTA * KS_1CTA_PER) {
            if (!resident) {
                load(base);
            }
#pragma unroll
            for (int u = 0; u < KS_1CTA_PER; u++) {
                int i = base + u * KS_1CTA + tid;
                ks_count(h, i < n && (key[u] & mask) == prefix, (key[u] >> shift) & dm, lane);
            }
        }
        __syncthreads();
        ks_pick(h, (uint32_t)want, scratch, res);
        const int d = res[0] < 0 ? 0 : res[0], kl = res[1];
        __syncthreads(); /* res and h are rewritten next */
        prefix |= (uint32_t)d << shift;
        mask |= dm << shift;
        want = kl;
    }
    *thr = prefix;
    *k_left = want;
}

/* Appends idx to out at a slot from the shared counter *cnt (lanes of a warp share one atomic). */
__device__ __forceinline__ void ks_append(bool take, int32_t idx, int32_t *out, int *cnt, int lane)
{
    unsigned m = __ballot_sync(0xffffffffu, take);
    int base = 0;
    if (lane == 0 && m) {
        base = atomicAdd(cnt, __popc(m));
    }
    base = __shfl_sync(0xffffffffu, base, 0);
    if (take) {
        out[base + __popc(m & ((1u << lane) - 1))] = idx;
    }
}

/* Appends to list, at slots from the shared counter *cnt, every block b < nb whose bound's key
 * lies in [lo, hi) (hi = 2^32: no upper end). All KS_1CTA threads of the CTA call it; each sweep
 * loads its bounds before it appends. */
__device__ __forceinline__ void ks_list_blocks(const float *bound, int nb, uint32_t lo, uint64_t hi,
                                               int32_t *list, int *cnt)
{
    const int tid = threadIdx.x, lane = tid & 31;
    for (int base = 0; base < nb; base += KS_1CTA * KS_1CTA_PER) {
        float v[KS_1CTA_PER];
#pragma unroll
        for (int u = 0; u < KS_1CTA_PER; u++) {
            int b = base + u * KS_1CTA + tid;
            v[u] = b < nb ? bound[b] : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < KS_1CTA_PER; u++) {
            int b = base + u * KS_1CTA + tid;
            uint32_t bk = ks_key(v[u]);
            ks_append(b < nb && bk >= lo && bk < hi, b, list, cnt, lane);
        }
    }
}

/* Adds the non-zero bins of the shared histogram h into st->hist (nt threads, the CTA's). */
__device__ __forceinline__ void ks_hist_add(const uint32_t *h, ks_state_t *st, int nt)
{
    for (int i = threadIdx.x; i < KS_BINS; i += nt) {
        if (h[i]) {
            atomicAdd(&st->hist[i], h[i]);
        }
    }
}

/* Kernel 2: resets the state, selects the seed threshold thr[0], lists the seed blocks. */
__global__ void __launch_bounds__(KS_1CTA)
    ks_seed_kernel(const float *bound, int nb, int n_seed, ks_state_t *st, uint32_t *thr,
                   int32_t *list)
{
    __shared__ uint32_t h[KS_BINS], scratch[32];
    __shared__ int res[2], cnt;
    const int tid = threadIdx.x;
    for (int i = tid; i < KS_BINS; i += KS_1CTA) {
        st->hist[i] = 0;
    }
    if (tid == 0) {
        st->prefix = 0;
        st->mask = 0;
        st->k_left = 0;
        st->done = 0;
        st->n_cand = 0;
        st->n_taken_eq = 0;
        st->n_out = 0;
        cnt = 0;
    }
    __syncthreads();
    uint32_t t0;
    int kl;
    ks_cta_select(bound, nb, n_seed, h, scratch, res, &t0, &kl);
    ks_list_blocks(bound, nb, t0, (uint64_t)1 << 32, list, &cnt);
    __syncthreads();
    if (tid == 0) {
        thr[0] = t0;
        st->n_list = cnt;
        st->list_start = 0;
    }
}

/*
 * Kernel 4: tau = thr[1]; lists the blocks with tau <= bound < thr[0] after the seed's; counts
 * the first digits of the seed rows >= tau into st->hist; st->n_cand becomes the slots of the
 * whole list.
 */
__global__ void __launch_bounds__(KS_1CTA)
    ks_tau_kernel(const float *bound, int nb, int k, int block_rows, const float *cand_s,
                  int32_t *list, ks_state_t *st, uint32_t *thr)
{
    __shared__ uint32_t h[KS_BINS], scratch[32];
    __shared__ int res[2], cnt_list;
    const int tid = threadIdx.x, lane = tid & 31;
    const int n = st->n_cand, n_list0 = st->n_list;
    const uint32_t t0 = thr[0];
    if (tid == 0) {
        cnt_list = 0;
    }
    __syncthreads();
    uint32_t t1;
    int kl;
    ks_cta_select(cand_s, n, k, h, scratch, res, &t1, &kl);
    ks_list_blocks(bound, nb, t1, t0, list + n_list0, &cnt_list);
    ks_hist_zero(h, KS_1CTA);
    __syncthreads();
    for (int base = 0; base < n; base += KS_1CTA * KS_1CTA_PER) {
        float v[KS_1CTA_PER];
#pragma unroll
        for (int u = 0; u < KS_1CTA_PER; u++) {
            int i = base + u * KS_1CTA + tid;
            v[u] = i < n ? cand_s[i] : KS_EMPTY;
        }
#pragma unroll
        for (int u = 0; u < KS_1CTA_PER; u++) {
            uint32_t key = ks_key(v[u]);
            ks_count(h, key != 0 && key >= t1, key >> 21, lane);
        }
    }
    __syncthreads();
    ks_hist_add(h, st, KS_1CTA);
    if (tid == 0) {
        thr[1] = t1;
        st->list_start = n_list0;
        st->n_list = n_list0 + cnt_list;
        st->n_cand = (n_list0 + cnt_list) * block_rows;
        st->done = 0;
    }
}

/*
 * The end of a multi-CTA histogram pass: adds this CTA's h (shared) into st->hist; the last CTA
 * to finish takes the global histogram (clearing it), picks digit p of the k_left-th best
 * candidate matching the prefix, and extends the prefix. want0 > 0 replaces st->k_left (the
 * first pass). Every thread of every CTA must call it.
 */
__device__ void ks_pass_end(uint32_t *h, ks_state_t *st, int p, int want0)
{
    /* The pass end's own room, one instance a CTA in each kernel that calls it. */
    __shared__ uint32_t scratch[32];
    __shared__ int res[2];
    __shared__ bool last;
    const int tid = threadIdx.x;
    __syncthreads();
    ks_hist_add(h, st, blockDim.x);
    __threadfence();
    __syncthreads();
    if (tid == 0) {
        last = atomicAdd(&st->done, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!last) {
        return;
    }
    __threadfence();
    /* Every other CTA fenced its adds before counting itself: read the global histogram from
     * L2 with all loads in flight at once (a loop of atomicExch waited for each in turn: 2-4 us
     * a pass on the H200), then clear it. */
    {
        const int nt = blockDim.x;
        uint32_t v[KS_BINS / 128]; /* bins a thread at 128 threads, the fewest that call this */
#pragma unroll
        for (int u = 0; u < KS_BINS / 128; u++) {
            const int i = tid + u * nt;
            v[u] = i < KS_BINS ? __ldcg(&st->hist[i]) : 0u;
        }
#pragma unroll
        for (int u = 0; u < KS_BINS / 128; u++) {
            const int i = tid + u * nt;
            if (i < KS_BINS) {
                h[i] = v[u];
                st->hist[i] = 0u;
            }
        }
    }
    if (tid == 0) {
        st->done = 0; /* every CTA has counted itself */
    }
    __syncthreads();
    const uint32_t mask = st->mask;
    const int want = want0 > 0 ? want0 : st->k_left;
    if (mask == 0xffffffffu) {
        return; /* uniform: every digit is fixed already */
    }
    ks_pick(h, (uint32_t)want, scratch, res);
    if (tid == 0) {
        const int d = res[0] < 0 ? 0 : res[0];
        st->prefix |= (uint32_t)d << ks_shift(p);
        st->mask = mask | (ks_dmask(p) << ks_shift(p));
        st->k_left = res[1];
    }
}

/*
 * Kernels 3 and 5: score the rows of the list entries from list_start on (block_rows / 16
 * groups each) into the candidate slots (entry i: i*block_rows ..). REST (kernel 5): rows
 * whose score is >= tau (thr[1]) are counted in the histogram, and the last CTA picks the first
 * digit of the k-th best.
 */
template <bool WG, bool REST>
__global__ void __launch_bounds__(128, WG ? (REST ? 3 : 4) : 2)
    ks_score_blocks(const float *q, const float *w, int n_heads, const uint8_t *keys8,
                    const float *key_scale, int n_keys, int block_rows, const int32_t *list,
                    float *cand_s, int32_t *cand_i, ks_state_t *st, const uint32_t *thr, int k)
{
    extern __shared__ __align__(128) unsigned char ks_dyn[];
    __shared__ uint32_t h[REST ? KS_BINS : 1];
    const int lane = threadIdx.x & 31, gpb = block_rows / 16;
    const int first = st->list_start * gpb, n_items = st->n_list * gpb;
    if (!REST && blockIdx.x == 0 && threadIdx.x == 0) {
        st->n_cand = st->n_list * block_rows;
    }
    if (REST) {
        ks_hist_zero(h, blockDim.x);
        __syncthreads();
    }
    const uint32_t tau = thr[REST ? 1 : 0]; /* used when REST */
    auto map = [&](int i) { return __ldg(list + i / gpb) * gpb + i % gpb; };
    auto emit = [&](int i, int g, float s0, float s1) {
        if ((lane & 3) == 0) {
            const int r0 = g * 16 + (lane >> 2), r1 = r0 + 8;
            const int o0 = i * 16 + (lane >> 2), o1 = o0 + 8;
            cand_s[o0] = r0 < n_keys ? s0 : KS_EMPTY;
            cand_i[o0] = r0 < n_keys ? r0 : -1;
            cand_s[o1] = r1 < n_keys ? s1 : KS_EMPTY;
            cand_i[o1] = r1 < n_keys ? r1 : -1;
            if (REST) {
                const uint32_t k0 = ks_key(s0), k1 = ks_key(s1);
                if (r0 < n_keys && k0 >= tau) {
                    atomicAdd(&h[k0 >> 21], 1u);
                }
                if (r1 < n_keys && k1 >= tau) {
                    atomicAdd(&h[k1 >> 21], 1u);
                }
            }
        }
    };
#if KF_WGMMA
    if (WG) {
        kf_wg_score(q, w, n_heads, keys8, key_scale, n_keys, first, n_items, map, emit, ks_dyn);
    } else
#endif
    {
        kf_mma_score(q, w, n_heads, keys8, key_scale, n_keys, first, n_items, map, emit, ks_dyn);
    }
    if (REST) {
        ks_pass_end(h, st, 0, k);
    }
}

#define KS_PASS_PER 4 /* float4 loads per thread per sweep, all issued first */

/*
 * This CTA's share of a grid-strided sweep over vals[0 .. 4 n4) in float4 loads, KS_PASS_PER of
 * them in flight a thread (all loaded before any is visited): visit(i, vals[i]) for each slot,
 * slots past the end as KS_EMPTY. All lanes of a warp visit in step, so visit may vote.
 */
template <class Visit>
__device__ __forceinline__ void ks_sweep4(const float *vals, int n4, Visit visit)
{
    const int tid = threadIdx.x, stride = gridDim.x * KS_THREADS * KS_PASS_PER;
    for (int base = blockIdx.x * KS_THREADS * KS_PASS_PER; base < n4; base += stride) {
        float4 v[KS_PASS_PER];
#pragma unroll
        for (int u = 0; u < KS_PASS_PER; u++) {
            int i4 = base + u * KS_THREADS + tid;
            v[u] = i4 < n4 ? reinterpret_cast<const float4 *>(vals)[i4]
                           : make_float4(KS_EMPTY, KS_EMPTY, KS_EMPTY, KS_EMPTY);
        }
#pragma unroll
        for (int u = 0; u < KS_PASS_PER; u++) {
            const float f[4] = {v[u].x, v[u].y, v[u].z, v[u].w};
#pragma unroll
            for (int e = 0; e < 4; e++) {
                visit(4 * (base + u * KS_THREADS + tid) + e, f[e]);
            }
        }
    }
}

/* Kernels 6 and 7: digit p (1, 2) of the k-th best candidate, over every slot. */
__global__ void __launch_bounds__(KS_THREADS)
    ks_pass_kernel(const float *vals, ks_state_t *st, int p)
{
    __shared__ uint32_t h[KS_BINS];
    const int tid = threadIdx.x, lane = tid & 31;
    ks_hist_zero(h, KS_THREADS);
    __syncthreads();
    const int n = st->n_cand, shift = ks_shift(p);
    const uint32_t prefix = st->prefix, mask = st->mask, dm = ks_dmask(p);
    if (mask != 0xffffffffu) {
        /* n is a multiple of 16 (whole groups of slots). */
        ks_sweep4(vals, n >> 2, [&](int, float f) {
            uint32_t key = ks_key(f);
            ks_count(h, (key & mask) == prefix, (key >> shift) & dm, lane);
        });
    }
    ks_pass_end(h, st, p, 0);
}

/* Kernel 8: the candidates above the threshold, and as many equal to it as the rank asks. */
__global__ void __launch_bounds__(KS_THREADS)
    ks_gather(const float *cand_s, const int32_t *cand_i, ks_state_t *st, int k, int32_t *idx,
              float *score)
{
    const int n4 = st->n_cand >> 2; /* a multiple of 16 slots */
    const uint32_t thr = st->prefix;
    const int eq_wanted = st->k_left;
    ks_sweep4(cand_s, n4, [&](int i, float f) {
        const uint32_t key = ks_key(f);
        if (key < thr) {
            return;
        }
        bool take = key > thr;
        if (key == thr) {
            take = atomicAdd(&st->n_taken_eq, 1) < eq_wanted;
        }
        if (take) {
            int o = atomicAdd(&st->n_out, 1);
            if (o < k) {
                idx[o] = cand_i[i];
                if (score) {
                    score[o] = f;
                }
            }
        }
    });
}

/*
 * The dense path (docs/kernels.md §2), five steps on a zeroed state:
 *   D1. every row is scored (slot = row) and the first radix digit (11 bits) of every row is
 *       counted in shared memory; the last CTA picks the digit of the k-th best;
 *   D2. one pass over the dense scores counts the second digit of the rows with the chosen
 *       first digit and lists every row whose first digit is at least the chosen one (the
 *       compact list: fewer than k rows above the digit, and the rows at it);
 *   D3. the third digit over the compact list;
 *   D4. gather from the compact list.
 * No bounds and no one-CTA select: the cost is that of the dense scorer plus one read of the
 * dense scores, whatever the keys.
 */
template <bool WG, int NS>
__global__ void __launch_bounds__(128, WG ? (NS <= 3 ? 4 : 3) : 2)
    ks_dense_score(const float *q, const float *w, int n_heads, const uint8_t *keys8,
                   const float *key_scale, int n_keys, float *vals, ks_state_t *st, int k)
{
    extern __shared__ __align__(128) unsigned char ks_dyn[];
    __shared__ uint32_t h[KS_BINS];
    const int lane = threadIdx.x & 31, n_groups = (n_keys + 15) / 16;
    ks_hist_zero(h, blockDim.x);
    __syncthreads();
    auto ident = [](int i) { return i; };
    auto emit = [&](int, int g, float s0, float s1) {
        const int r0 = g * 16 + (lane >> 2), r1 = r0 + 8;
        /* Plain shared atomics: warp-wide votes here would make ptxas serialise the wgmmas. */
        if ((lane & 3) == 0) {
            vals[r0] = r0 < n_keys ? s0 : KS_EMPTY;
            vals[r1] = r1 < n_keys ? s1 : KS_EMPTY;
            if (r0 < n_keys) {
                atomicAdd(&h[ks_key(s0) >> 21], 1u);
            }
            if (r1 < n_keys) {
                atomicAdd(&h[ks_key(s1) >> 21], 1u);
            }
        }
    };
#if KF_WGMMA
    if (WG) {
        kf_wg_score<NS>(q, w, n_heads, keys8, key_scale, n_keys, 0, n_groups, ident, emit, ks_dyn);
    } else
#endif
    {
        kf_mma_score(q, w, n_heads, keys8, key_scale, n_keys, 0, n_groups, ident, emit, ks_dyn);
    }
    ks_pass_end(h, st, 0, k);
}

/* D2: the second digit, and the compact list (rows, in any order) in comp. */
__global__ void __launch_bounds__(KS_THREADS)
    ks_dense_compact(const float *vals, int n_keys, ks_state_t *st, int32_t *comp)
{
    __shared__ uint32_t h[KS_BINS];
    const int tid = threadIdx.x, lane = tid & 31;
    ks_hist_zero(h, KS_THREADS);
    __syncthreads();
    const uint32_t prefix = st->prefix, mask = st->mask;
    /* vals holds whole groups of 16 slots, so the float4 reads stay inside it. */
    ks_sweep4(vals, (n_keys + 3) >> 2, [&](int r, float f) {
        const uint32_t key = ks_key(f);
        const bool ok = r < n_keys;
        ks_count(h, ok && (key & mask) == prefix, (key >> 10) & 0x7ffu, lane);
        ks_append(ok && key >= prefix, r, comp, &st->n_comp, lane);
    });
    ks_pass_end(h, st, 1, 0);
}

/* D3: the third digit over the compact list. */
__global__ void __launch_bounds__(KS_THREADS)
    ks_comp_pass(const float *vals, const int32_t *comp, ks_state_t *st)
{
    __shared__ uint32_t h[KS_BINS];
    const int tid = threadIdx.x, lane = tid & 31;
    ks_hist_zero(h, KS_THREADS);
    __syncthreads();
    const int n = st->n_comp;
    const uint32_t prefix = st->prefix, mask = st->mask;
    if (mask != 0xffffffffu) {
        for (int base = blockIdx.x * KS_THREADS; base < n; base += gridDim.x * KS_THREADS) {
            const int j = base + tid;
            const uint32_t key = j < n ? ks_key(vals[comp[j]]) : 0;
            ks_count(h, j < n && (key & mask) == prefix, key & 0x3ffu, lane);
        }
    }
    ks_pass_end(h, st, 2, 0);
}

/* D4: the compact rows above the k-th key, and as many equal to it as the rank asks. */
__global__ void __launch_bounds__(KS_THREADS)
    ks_comp_gather(const float *vals, const int32_t *comp, ks_state_t *st, int k, int32_t *idx,
                   float *score)
{
    const int n = st->n_comp, lane = threadIdx.x & 31;
    const uint32_t thr = st->prefix;
    const int eq_wanted = st->k_left;
    for (int base = blockIdx.x * KS_THREADS; base < n; base += gridDim.x * KS_THREADS) {
        const int j = base + threadIdx.x;
        const int row = j < n ? comp[j] : -1;
        const float f = j < n ? vals[row] : KS_EMPTY;
        const uint32_t key = ks_key(f);
        bool take = j < n && key > thr;
        if (j < n && key == thr) {
            take = atomicAdd(&st->n_taken_eq, 1) < eq_wanted;
        }
        const unsigned m = __ballot_sync(0xffffffffu, take);
        int o = 0;
        if (lane == 0 && m) {
            o = atomicAdd(&st->n_out, __popc(m));
        }
        o = __shfl_sync(0xffffffffu, o, 0) + __popc(m & ((1u << lane) - 1));
        if (take && o < k) {
            idx[o] = row;
            if (score) {
                score[o] = f;
            }
        }
    }
}

/* Workspace layout (byte offsets, each 256-aligned). */
typedef struct ks_layout {
    size_t st, bound, cand_s, cand_i, list, total;
} ks_layout_t;

static size_t ks_up(size_t x)
{
    return (x + 255) & ~(size_t)255;
}

static ks_layout_t ks_layout(int n_keys, int block_rows)
{
    ks_layout_t l;
    size_t nb = (size_t)(n_keys + block_rows - 1) / block_rows;
    size_t nc = nb * (size_t)block_rows; /* a slot per row of every block */
    l.st = 256;                          /* [0, 256): thresholds */
    l.bound = l.st + ks_up(sizeof(ks_state_t));
    l.cand_s = l.bound + ks_up(nb * sizeof(float));
    l.cand_i = l.cand_s + ks_up(nc * sizeof(float));
    l.list = l.cand_i + ks_up(nc * sizeof(int32_t));
    l.total = l.list + ks_up(nb * sizeof(int32_t));
    return l;
}

extern "C" size_t st_cuda_indexer_topk_workspace(int n_keys, int block_rows)
{
    if (n_keys <= 0 || block_rows <= 0) {
        return 0;
    }
    return ks_layout(n_keys, block_rows).total;
}

/*
 * Which path a call takes (docs/kernels.md §2): STRATA_KN_TOPK=twostage forces the two-stage
 * path; otherwise (auto, or =dense) the dense path. Measured on the H200 (1M keys, 64-row
 * blocks), the dense path wins on random keys (82 against 170 us) and on block-structured keys
 * (83 against 99 us): the two-stage's fixed costs (block bounds 29 us, two one-CTA selects
 * 29 us) exceed all the scoring that pruning saves.
 */
static bool ks_use_dense(void)
{
    return !kn_variant_is("STRATA_KN_TOPK", "twostage");
}

template <bool WG, int NS>
static void ks_launch_dense(int grid, int smem, cudaStream_t s, const float *q, const float *w,
                            int n_heads, const uint8_t *keys8, const float *key_scale, int n_keys,
                            float *vals, ks_state_t *st, int k)
{
    cudaFuncSetAttribute(ks_dense_score<WG, NS>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    ks_dense_score<WG, NS>
        <<<grid, 128, smem, s>>>(q, w, n_heads, keys8, key_scale, n_keys, vals, st, k);
}

/* The dense path: D1..D4 above, after zeroing the state. */
static st_status_t ks_topk_dense(const float *q, const float *w, int n_heads, const uint8_t *keys8,
                                 const float *key_scale, int n_keys, int k, ks_state_t *st,
                                 float *vals, int32_t *comp, int32_t *idx, float *score,
                                 cudaStream_t s)
{
    if (cudaMemsetAsync(st, 0, sizeof(ks_state_t), s) != cudaSuccess) {
        return kn_launch_status("indexer_topk_dense memset");
    }
    const int sms = kn_num_sms(), items = ((n_keys + 15) / 16 + 3) / 4;
    if (!kn_variant_is("STRATA_KN_SCORER", "mma")) {
        /* A ring of 4 stages and 3 CTAs per SM (with the histogram, 4 CTAs do not fit), or
         * STRATA_KN_DENSE_RING=3: 3 stages and 4 CTAs per SM (4.3 us slower on the H200). */
        if (kn_variant_int("STRATA_KN_DENSE_RING", 4) != 3) {
            const int grid = items < 3 * sms ? items : 3 * sms;
            ks_launch_dense<true, 4>(grid, KF_WG_SMEM_N(4), s, q, w, n_heads, keys8, key_scale,
                                     n_keys, vals, st, k);
        } else {
            const int grid = items < 4 * sms ? items : 4 * sms;
            ks_launch_dense<true, 3>(grid, KF_WG_SMEM_N(3), s, q, w, n_heads, keys8, key_scale,
                                     n_keys, vals, st, k);
        }
    } else {
        const int grid = items < 2 * sms ? items : 2 * sms;
        ks_launch_dense<false, 3>(grid, KF_MMA_SMEM, s, q, w, n_heads, keys8, key_scale, n_keys,
                                  vals, st, k);
    }
    ks_dense_compact<<<KS_GRID, KS_THREADS, 0, s>>>(vals, n_keys, st, comp);
    const int g = sms / 2 > 0 ? sms / 2 : 1;
    ks_comp_pass<<<g, KS_THREADS, 0, s>>>(vals, comp, st);
    ks_comp_gather<<<g, KS_THREADS, 0, s>>>(vals, comp, st, k, idx, score);
    return kn_launch_status("indexer_topk_dense");
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
    const ks_layout_t l = ks_layout(n_keys, block_rows);
    unsigned char *p = (unsigned char *)workspace;
    uint32_t *thr = (uint32_t *)p; /* [0] seed bound key, [1] tau key */
    ks_state_t *st = (ks_state_t *)(p + l.st);
    float *bound = (float *)(p + l.bound), *cand_s = (float *)(p + l.cand_s);
    int32_t *cand_i = (int32_t *)(p + l.cand_i), *list = (int32_t *)(p + l.list);
    st_status_t rc;

    if (ks_use_dense()) {
        return ks_topk_dense(q, w, n_heads, keys8, key_scale, n_keys, k, st, cand_s, cand_i, idx,
                             score, s);
    }
    rc = st_cuda_block_bounds(q, w, n_heads, KF_DIM, summary, nb, bound, stream);
    if (rc != ST_OK) {
        return rc;
    }
    /* Seed: blocks whose bound ranks among the best n_seed (STRATA_KN_SEED times the blocks
     * that k rows fill; 2 puts tau near the seed's median). */
    int n_seed = kn_variant_int("STRATA_KN_SEED", 2) * ((k + block_rows - 1) / block_rows);
    n_seed = n_seed < nb ? n_seed : nb;
    ks_seed_kernel<<<1, KS_1CTA, 0, s>>>(bound, nb, n_seed, st, thr, list);
    const int sms = kn_num_sms();
    if (!kn_variant_is("STRATA_KN_SCORER", "mma")) {
        const int smem = KF_WG_SMEM;
        cudaFuncSetAttribute(ks_score_blocks<true, false>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        cudaFuncSetAttribute(ks_score_blocks<true, true>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        ks_score_blocks<true, false><<<4 * sms, 128, smem, s>>>(
            q, w, n_heads, keys8, key_scale, n_keys, block_rows, list, cand_s, cand_i, st, thr, k);
        ks_tau_kernel<<<1, KS_1CTA, 0, s>>>(bound, nb, k, block_rows, cand_s, list, st, thr);
        ks_score_blocks<true, true><<<3 * sms, 128, smem, s>>>(
            q, w, n_heads, keys8, key_scale, n_keys, block_rows, list, cand_s, cand_i, st, thr, k);
    } else {
        const int smem = KF_MMA_SMEM;
        ks_score_blocks<false, false><<<2 * sms, 128, smem, s>>>(
            q, w, n_heads, keys8, key_scale, n_keys, block_rows, list, cand_s, cand_i, st, thr, k);
        ks_tau_kernel<<<1, KS_1CTA, 0, s>>>(bound, nb, k, block_rows, cand_s, list, st, thr);
        ks_score_blocks<false, true><<<2 * sms, 128, smem, s>>>(
            q, w, n_heads, keys8, key_scale, n_keys, block_rows, list, cand_s, cand_i, st, thr, k);
    }
    ks_pass_kernel<<<KS_GRID, KS_THREADS, 0, s>>>(cand_s, st, 1);
    ks_pass_kernel<<<KS_GRID, KS_THREADS, 0, s>>>(cand_s, st, 2);
    ks_gather<<<KS_GRID, KS_THREADS, 0, s>>>(cand_s, cand_i, st, k, idx, score);
    return kn_launch_status("indexer_topk_fp8");
}
