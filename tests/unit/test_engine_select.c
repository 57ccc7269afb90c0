/*
 * test_engine_select.c - the keys window and the merge of near-data scoring
 * (engine/select.c, engine/seq.c) without a cluster: a sequence with a pool
 * of 1 block and the keys window runs beside an unbounded sequence of the
 * same tokens (the shadow); its score source answers from the shadow's keys
 * (st_cpu_indexer_topk over the blocks before the window, what a daemon
 * answers) and its row source reads the shadow's rows. Every selection must
 * equal the shadow's (local scoring of every key), the logits must agree
 * within the tolerance of a pool, and the window must hold (P + 1) blocks of
 * keys. Then answers that are not one (a candidate short, a position inside
 * the window, two candidates out of order) must be refused: the sequence
 * falls back (localize) instead of merging them.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "en_internal.h"
#include "strata/engine.h"
#include "strata/kernels.h"
#include "support/unit_main.h"

#define N_TOK 300 /* past the window: blocks 0..3 outside a pool of 1 by the end */

typedef struct shadow {
    st_seq_t *ref; /* every key local */
    int corrupt;   /* 0 an honest answer; 1 one short, 2 a position in the window, 3 order */
    uint64_t pos[512];
    float sc[512];
    size_t n;
    int calls, localized;
    uint64_t digest[2]; /* of the selections: [0] the window's, [1] the shadow's */
} shadow_t;

static shadow_t sh;

static st_status_t sc_start(void *arg, int l, const float *q, const float *w, uint32_t k,
                            size_t n_blocks)
{
    const st_model_config_t *c = &sh.ref->m->cfg;
    size_t B = c->block_tokens, rows = n_blocks * B;
    int32_t idx[512];

    (void)arg;
    assert_true(k <= 512);
    sh.calls++;
    sh.n = k < rows ? k : rows;
    assert_int_equal(st_cpu_indexer_topk(q, w, (int)c->idx_heads, (int)c->idx_dim,
                                         sh.ref->dsa[l].keys, (int)rows, (int)B,
                                         sh.ref->dsa[l].summary, (int)k, idx, sh.sc, NULL),
                     ST_OK);
    for (size_t i = 0; i < sh.n; i++) {
        sh.pos[i] = (uint64_t)idx[i];
    }
    if (sh.corrupt == 1) {
        sh.n--;
    } else if (sh.corrupt == 2) {
        sh.pos[sh.n - 1] = rows; /* the window's first row */
    } else if (sh.corrupt == 3 && sh.n > 1) {
        uint64_t p = sh.pos[0];
        float s = sh.sc[0];

        /* Swapped: a lower score first, or in a tie the higher position. */
        sh.pos[0] = sh.pos[1];
        sh.sc[0] = sh.sc[1];
        sh.pos[1] = p;
        sh.sc[1] = s;
    }
    return ST_OK;
}

static st_status_t sc_finish(void *arg, const uint64_t **pos_p, const float **sc_p, size_t *n_p)
{
    (void)arg;
    *pos_p = sh.pos;
    *sc_p = sh.sc;
    *n_p = sh.n;
    return ST_OK;
}

static st_status_t sc_localize(void *arg)
{
    (void)arg;
    sh.localized++;
    return ST_ERR_UNAVAILABLE;
}

static st_status_t rows_start(void *arg, int l, const int32_t *tok, size_t n, float *dst)
{
    (void)arg;
    for (size_t i = 0; i < n; i++) {
        memcpy(dst + i * (size_t)sh.ref->m->row, en_kv_row(sh.ref, l, (size_t)tok[i]),
               sizeof(float) * (size_t)sh.ref->m->row);
    }
    return ST_OK;
}

static st_status_t rows_finish(void *arg)
{
    (void)arg;
    return ST_OK;
}

static void on_select(void *arg, uint32_t layer, uint64_t pos, const int32_t *rows, uint32_t n)
{
    uint64_t *d = arg, h = *d ? *d : 1469598103934665603ull;

    h = ((h ^ layer) * 1099511628211ull ^ pos) * 1099511628211ull;
    for (uint32_t i = 0; i < n; i++) {
        h = (h ^ (uint32_t)rows[i]) * 1099511628211ull;
    }
    *d = h;
}

/* A windowed sequence (pool of 1 block) over the shadow's source. */
static st_seq_t *windowed(st_model_t *m)
{
    st_seq_t *s;

    assert_int_equal(st_seq_create(m, &s), ST_OK);
    s->score = (en_scoresrc_t){NULL, sc_start, sc_finish, sc_localize};
    assert_int_equal(en_seq_set_ring(s, 2), ST_OK);
    assert_true(s->kwin);
    s->rowsrc = (en_rowsrc_t){NULL, rows_start, rows_finish, NULL, 0};
    s->on_select = on_select;
    s->on_select_arg = &sh.digest[0];
    return s;
}

static uint32_t token(size_t i)
{
    return (uint32_t)((i + 1) * 2654435761u >> 7) % 512;
}

static void test_window_equals_local(void **state)
{
    st_model_config_t mc;
    st_model_t *m;
    st_seq_t *s;
    float a[512], b[512];
    double diff = 0, mx = 0;

    (void)state;
    st_model_config_default(&mc);
    assert_int_equal(st_model_create(&mc, &m), ST_OK);
    memset(&sh, 0, sizeof(sh));
    assert_int_equal(st_seq_create(m, &sh.ref), ST_OK);
    sh.ref->on_select = on_select;
    sh.ref->on_select_arg = &sh.digest[1];
    s = windowed(m);
    for (size_t t = 0; t < N_TOK; t++) {
        assert_int_equal(st_seq_forward(sh.ref, token(t), b), ST_OK);
        assert_int_equal(st_seq_forward(s, token(t), a), ST_OK);
        assert_true(sh.digest[0] == sh.digest[1]); /* the same rows, same order, every step */
    }
    for (int v = 0; v < 512; v++) {
        diff = fmax(diff, fabs((double)a[v] - b[v]));
        mx = fmax(mx, fabs((double)b[v]));
    }
    assert_true(diff / mx <= 1e-5); /* three partials merged instead of two: rounding only */
    assert_int_equal(sh.calls, (N_TOK - 128) * 2); /* from block 2 on, both DSA layers */
    assert_int_equal(sh.localized, 0);
    assert_int_equal(s->kbase, N_TOK / 64 - 1);
    assert_int_equal(en_seq_keys_bytes(s), 2u * 2 * (64 + 2) * 32 * sizeof(float));
    assert_true(en_seq_keys_bytes(sh.ref) >= 4 * en_seq_keys_bytes(s)); /* 8 blocks of capacity */
    st_seq_free(s);
    st_seq_free(sh.ref);
    st_model_free(m);
}

/* Answers that are not one are refused: the sequence localizes instead. */
static void test_bad_answers_refused(void **state)
{
    st_model_config_t mc;
    st_model_t *m;

    (void)state;
    st_model_config_default(&mc);
    assert_int_equal(st_model_create(&mc, &m), ST_OK);
    for (int bad = 1; bad <= 3; bad++) {
        st_seq_t *s;
        st_status_t r = ST_OK;
        size_t t;

        memset(&sh, 0, sizeof(sh));
        assert_int_equal(st_seq_create(m, &sh.ref), ST_OK);
        s = windowed(m);
        sh.corrupt = bad;
        for (t = 0; t < N_TOK && r == ST_OK; t++) {
            assert_int_equal(st_seq_forward(sh.ref, token(t), NULL), ST_OK);
            r = st_seq_forward(s, token(t), NULL);
        }
        print_message("# bad answer %d: refused at token %zu, localized %d, status %s\n", bad,
                      t - 1, sh.localized, st_status_name(r));
        assert_int_equal(r, ST_ERR_UNAVAILABLE); /* the fake localize's status */
        assert_int_equal(sh.localized, 1);
        assert_int_equal(sh.calls, 1); /* refused at the first answer */
        assert_int_equal(t - 1, 128);
        st_seq_free(s);
        st_seq_free(sh.ref);
    }
    st_model_free(m);
}

/* remote_scoring without a pool is refused, naming the field. */
static void test_mode_refused(void **state)
{
    st_model_config_t mc;
    st_model_t *m;
    st_engine_t *e = NULL;
    st_engine_params_t ep = {.field_mask = ST_ENGINE_FIELD_REMOTE_SCORING, .remote_scoring = 1};

    (void)state;
    st_model_config_default(&mc);
    assert_int_equal(st_model_create(&mc, &m), ST_OK);
    assert_int_equal(st_engine_create(m, &ep, &e), ST_ERR_INVALID);
    assert_null(e);
    ep.remote_scoring = 0; /* off: no pool needed */
    assert_int_equal(st_engine_create(m, &ep, &e), ST_OK);
    st_engine_free(e);
    st_model_free(m);
}

int main(void)
{
    UNIT_RUN(cmocka_unit_test(test_window_equals_local), cmocka_unit_test(test_bad_answers_refused),
             cmocka_unit_test(test_mode_refused));
}
