/*
 * select.c - the DSA indexer's selection of one token: the exact top-k of
 * rows 0..pos, scored locally over every key, or, with near-data scoring
 * (the keys window), the history outside the window scored by the cluster
 * (seq->score) while the window's keys are scored here, the two candidate
 * lists merged (docs/engine.md, "Near-data scoring").
 */
#include "en_internal.h"
#include "log.h"
#include "strata/kernels.h"

/* Whether candidate (sa, pa) ranks before (sb, pb): score descending, ties
 * by the lower position (st_cpu_indexer_topk's order). */
static int en_ranks_before(float sa, uint64_t pa, float sb, uint64_t pb)
{
    return sa > sb || (sa == sb && pa < pb);
}

/* The top-k over the local keys of blocks first.. below n_keys, into idx (positions) and sc. */
static st_status_t en_select_local(st_seq_t *s, const en_layer_t *L, size_t n_keys, size_t first,
                                   int k, int32_t *idx, float *sc)
{
    const st_model_config_t *c = &s->m->cfg;
    size_t B = c->block_tokens, off = first * B, n = n_keys - off;
    int kl = k < (int)n ? k : (int)n;
    st_status_t r;

    r = st_cpu_indexer_topk(s->tmp, s->w, (int)c->idx_heads, (int)c->idx_dim,
                            en_key_row(s, L->sub, off), (int)n, (int)B,
                            en_summary_of(s, L->sub, first), kl, idx, sc, NULL);
    for (int i = 0; r == ST_OK && off > 0 && i < kl; i++) {
        idx[i] += (int32_t)off;
    }
    return r;
}

st_status_t en_dsa_select_start(st_seq_t *s, const en_layer_t *L, size_t n_keys, int *k_p,
                                int *pending_p)
{
    const st_model_config_t *c = &s->m->cfg;
    size_t first = s->kwin ? s->kbase : 0;
    int k = (int)(c->topk < n_keys ? c->topk : n_keys);
    st_status_t r;

    *k_p = k;
    *pending_p = 0;
    if (first == 0) {
        return en_select_local(s, L, n_keys, 0, k, s->sel, NULL);
    }
    /* The history before the window on the nodes, the window here meanwhile. */
    r = s->score.start(s->score.arg, L->sub, s->tmp, s->w, (uint32_t)k, first);
    if (r != ST_OK) {
        return ST_OK; /* en_dsa_select_finish falls back */
    }
    *pending_p = 1;
    return en_select_local(s, L, n_keys, first, k, s->lsel, s->lsc);
}

/* Merges the cluster's n_r candidates (positions below the window) and the
 * window's into seq->sel, k in all. ST_ERR_CORRUPT for an answer that is
 * not one (logged). */
static st_status_t en_select_merge(st_seq_t *s, size_t n_keys, size_t first, int k,
                                   const uint64_t *rp, const float *rs, size_t n_r)
{
    size_t B = s->m->cfg.block_tokens, hist = first * B;
    size_t want = (size_t)k < hist ? (size_t)k : hist, n_l = n_keys - hist, i = 0, j = 0;

    n_l = (size_t)k < n_l ? (size_t)k : n_l;
    if (n_r != want) {
        lg_warn("Score answered another number of candidates candidates=%zu want=%zu", n_r, want);
        return ST_ERR_CORRUPT;
    }
    for (size_t x = 0; x < n_r; x++) {
        if (rp[x] >= hist || (x > 0 && !en_ranks_before(rs[x - 1], rp[x - 1], rs[x], rp[x]))) {
            lg_warn("Score answered a candidate out of range or order index=%zu position=%llu "
                    "history_rows=%zu",
                    x, (unsigned long long)rp[x], hist);
            return ST_ERR_CORRUPT;
        }
    }
    for (int o = 0; o < k; o++) {
        int take_r =
            j == n_l || (i < n_r && en_ranks_before(rs[i], rp[i], s->lsc[j], (uint64_t)s->lsel[j]));

        s->sel[o] = take_r ? (int32_t)rp[i++] : s->lsel[j++];
    }
    return ST_OK;
}

st_status_t en_dsa_select_finish(st_seq_t *s, const en_layer_t *L, size_t pos, size_t n_keys, int k,
                                 int pending, st_status_t started)
{
    size_t first = s->kwin ? s->kbase : 0;
    st_status_t r = started;

    if (r == ST_OK && first > 0) {
        const uint64_t *rp = NULL;
        const float *rs = NULL;
        size_t n_r = 0;

        r = pending ? s->score.finish(s->score.arg, &rp, &rs, &n_r) : ST_ERR_UNAVAILABLE;
        if (r == ST_OK) {
            r = en_select_merge(s, n_keys, first, k, rp, rs, n_r);
        }
        if (r != ST_OK) {
            /* The keys come here for the rest of the run; every layer's. */
            r = s->score.localize(s->score.arg);
            if (r == ST_OK) {
                r = en_select_local(s, L, n_keys, 0, k, s->sel, NULL);
            }
        }
    } else if (pending) {
        const uint64_t *rp;
        const float *rs;
        size_t n_r;

        s->score.finish(s->score.arg, &rp, &rs, &n_r); /* nothing stays in flight */
    }
    if (r == ST_OK && s->on_select) {
        s->on_select(s->on_select_arg, (uint32_t)L->sub, pos, s->sel, (uint32_t)k);
    }
    return r;
}
