/*
 * indexer.c - indexer scores, block summaries, block bounds and the exact
 * two-stage top-k selection, in fp32 C.
 */
#include <float.h>
#include <math.h>
#include <stdlib.h>

#include "kn_internal.h"

st_status_t st_cpu_indexer_scores(const float *q, const float *w, int n_q, int n_heads, int dim,
                                  const float *keys, int n_keys, float *scores)
{
    if (!q || !w || !keys || !scores || n_q <= 0 || n_heads <= 0 || dim <= 0 || n_keys <= 0) {
        return ST_ERR_INVALID;
    }
    for (int t = 0; t < n_q; t++) {
        const float *qt = q + (size_t)t * n_heads * dim;
        const float *wt = w + (size_t)t * n_heads;
        kn_ops.score_rows(qt, wt, n_heads, dim, keys, n_keys, scores + (size_t)t * n_keys);
    }
    return ST_OK;
}

st_status_t st_cpu_block_summary(const float *keys, int n_keys, int dim, int block_rows,
                                 float *summary)
{
    if (!keys || !summary || n_keys <= 0 || dim <= 0 || block_rows <= 0) {
        return ST_ERR_INVALID;
    }
    int n_blocks = (n_keys + block_rows - 1) / block_rows;
    for (int b = 0; b < n_blocks; b++) {
        float *mn = summary + (size_t)b * 2 * dim;
        float *mx = mn + dim;
        int end = (b + 1) * block_rows < n_keys ? (b + 1) * block_rows : n_keys;
        for (int c = 0; c < dim; c++) {
            mn[c] = INFINITY;
            mx[c] = -INFINITY;
        }
        for (int s = b * block_rows; s < end; s++) {
            const float *k = keys + (size_t)s * dim;
            for (int c = 0; c < dim; c++) {
                mn[c] = k[c] < mn[c] ? k[c] : mn[c];
                mx[c] = k[c] > mx[c] ? k[c] : mx[c];
            }
        }
    }
    return ST_OK;
}

/*
 * The bound is computed in double. The fp32 score of any row differs from its
 * exact value by at most (dim + n_heads + 2) * FLT_EPSILON * sum_j |w_j| sum_c |q_jc| |k_c|,
 * so that margin (twice over) is added before rounding up to float.
 */
st_status_t st_cpu_block_bounds(const float *q, const float *w, int n_heads, int dim,
                                const float *summary, int n_blocks, float *bound)
{
    if (!q || !w || !summary || !bound || n_heads <= 0 || dim <= 0 || n_blocks <= 0) {
        return ST_ERR_INVALID;
    }
    const double gamma = 2.0 * (dim + n_heads + 2) * (double)FLT_EPSILON;
    for (int b = 0; b < n_blocks; b++) {
        const float *mn = summary + (size_t)b * 2 * dim;
        const float *mx = mn + dim;
        double ub = 0.0, absum = 0.0;
        for (int j = 0; j < n_heads; j++) {
            const float *qj = q + (size_t)j * dim;
            double hi = 0.0, lo = 0.0, ab = 0.0;
            for (int c = 0; c < dim; c++) {
                double a = (double)qj[c] * mn[c], z = (double)qj[c] * mx[c];
                hi += a > z ? a : z;
                lo += a < z ? a : z;
                double m = fabs((double)mn[c]) > fabs((double)mx[c]) ? fabs((double)mn[c])
                                                                     : fabs((double)mx[c]);
                ab += fabs((double)qj[c]) * m;
            }
            double wj = w[j];
            double pick = wj >= 0.0 ? hi : lo;
            ub += wj * (pick > 0.0 ? pick : 0.0);
            absum += fabs(wj) * ab;
        }
        float f = (float)(ub + gamma * absum);
        bound[b] = nextafterf(f, INFINITY);
    }
    return ST_OK;
}

/* Row a ranks before row b: higher score, then lower index. */
static int kn_better(float sa, int32_t ia, float sb, int32_t ib)
{
    return sa > sb || (sa == sb && ia < ib);
}

/* A binary heap whose root is the worst of the k best rows so far. */
typedef struct kn_heap {
    float *s;
    int32_t *i;
    int n;
} kn_heap_t;

/* Swaps entries a and b of the heap. */
static void kn_heap_swap(kn_heap_t *h, int a, int b)
{
    float ts = h->s[a];
    int32_t ti = h->i[a];
    h->s[a] = h->s[b];
    h->i[a] = h->i[b];
    h->s[b] = ts;
    h->i[b] = ti;
}

static void kn_heap_sift_down(kn_heap_t *h, int p)
{
    for (;;) {
        int l = 2 * p + 1, r = l + 1, worst = p;
        if (l < h->n && kn_better(h->s[worst], h->i[worst], h->s[l], h->i[l])) {
            worst = l;
        }
        if (r < h->n && kn_better(h->s[worst], h->i[worst], h->s[r], h->i[r])) {
            worst = r;
        }
        if (worst == p) {
            return;
        }
        kn_heap_swap(h, p, worst);
        p = worst;
    }
}

static void kn_heap_offer(kn_heap_t *h, int cap, float s, int32_t idx)
{
    if (h->n < cap) {
        int c = h->n++;
        h->s[c] = s;
        h->i[c] = idx;
        while (c > 0) { /* sift up: a worse child moves towards the root */
            int p = (c - 1) / 2;
            if (!kn_better(h->s[p], h->i[p], h->s[c], h->i[c])) {
                break;
            }
            kn_heap_swap(h, p, c);
            c = p;
        }
    } else if (kn_better(s, idx, h->s[0], h->i[0])) {
        h->s[0] = s;
        h->i[0] = idx;
        kn_heap_sift_down(h, 0);
    }
}

typedef struct kn_pair {
    float s;
    int32_t i;
} kn_pair_t;

static int kn_cmp_rank(const void *a, const void *b)
{
    const kn_pair_t *x = a, *y = b;
    if (kn_better(x->s, x->i, y->s, y->i)) {
        return -1;
    }
    return kn_better(y->s, y->i, x->s, x->i) ? 1 : 0;
}

st_status_t st_cpu_indexer_topk(const float *q, const float *w, int n_heads, int dim,
                                const float *keys, int n_keys, int block_rows, const float *summary,
                                int k, int32_t *idx, float *score, int *n_scored_p)
{
    if (!q || !w || !keys || !summary || !idx || n_heads <= 0 || dim <= 0 || n_keys <= 0 ||
        block_rows <= 0 || k <= 0) {
        return ST_ERR_INVALID;
    }
    if (k > n_keys) {
        k = n_keys;
    }
    int n_blocks = (n_keys + block_rows - 1) / block_rows;
    float *bound = malloc(sizeof(float) * n_blocks);
    kn_pair_t *order = malloc(sizeof(kn_pair_t) * n_blocks);
    kn_pair_t *pairs = malloc(sizeof(kn_pair_t) * k);
    kn_heap_t heap = {malloc(sizeof(float) * k), malloc(sizeof(int32_t) * k), 0};
    float *rowsc = malloc(sizeof(float) * (size_t)block_rows);
    st_status_t st = ST_ERR_NOMEM;
    if (!bound || !order || !pairs || !heap.s || !heap.i || !rowsc) {
        goto out;
    }
    st = st_cpu_block_bounds(q, w, n_heads, dim, summary, n_blocks, bound);
    if (st != ST_OK) {
        goto out;
    }
    for (int b = 0; b < n_blocks; b++) {
        order[b].s = bound[b];
        order[b].i = b;
    }
    qsort(order, n_blocks, sizeof(kn_pair_t), kn_cmp_rank);
    int scored = 0;
    for (int o = 0; o < n_blocks; o++) {
        int b = order[o].i;
        /* Every row of this and later blocks scores at most bound[b]: when that is below the
         * k-th best so far, no row of theirs can enter (a tie could, so ties are scored). */
        if (heap.n == k && bound[b] < heap.s[0]) {
            break;
        }
        int end = (b + 1) * block_rows < n_keys ? (b + 1) * block_rows : n_keys;
        kn_ops.score_rows(q, w, n_heads, dim, keys + (size_t)b * block_rows * dim,
                          end - b * block_rows, rowsc);
        for (int s = b * block_rows; s < end; s++) {
            kn_heap_offer(&heap, k, rowsc[s - b * block_rows], s);
        }
        scored++;
    }
    for (int i = 0; i < k; i++) {
        pairs[i].s = heap.s[i];
        pairs[i].i = heap.i[i];
    }
    qsort(pairs, k, sizeof(kn_pair_t), kn_cmp_rank);
    for (int i = 0; i < k; i++) {
        idx[i] = pairs[i].i;
        if (score) {
            score[i] = pairs[i].s;
        }
    }
    if (n_scored_p) {
        *n_scored_p = scored;
    }
out:
    free(bound);
    free(order);
    free(pairs);
    free(heap.s);
    free(heap.i);
    free(rowsc);
    return st;
}
