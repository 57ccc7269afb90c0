/*
 * test_engine_batch.c - batched decode (st_engine_run_batch, st_seq_forward_batch) on the CPU,
 * without a cluster: several engines of one model, each with its own prompt, decoded in
 * lockstep give exactly (bit for bit) the logits and ids each gives alone; a batch of one is
 * st_engine_run; the batched forward of sequences at different lengths equals their own
 * forwards; bad arguments are refused and leave the engines usable. The CUDA path runs the
 * same checks in test_engine_gpu.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "en_engine.h"
#include "strata/engine.h"
#include "support/unit_main.h"
#include "support/unit_tokens.h"

enum { NE = 5, DEC = 24 };

static st_model_t *model(void)
{
    st_model_config_t c;
    st_model_t *m = NULL;

    st_model_config_default(&c);
    c.topk = 32; /* below the longest history: the selection matters */
    assert_int_equal(st_model_create(&c, &m), ST_OK);
    return m;
}

static st_engine_t *engine(const st_model_t *m)
{
    st_engine_params_t ep = {0};
    st_engine_t *e = NULL;

    assert_int_equal(st_engine_create(m, &ep, &e), ST_OK);
    return e;
}

/* NE engines with prompts of different lengths, decoded together and alone. */
static void test_batch_equals_alone(void **state)
{
    static const size_t len[NE] = {70, 129, 200, 64, 33};
    st_model_t *m = model();
    uint32_t vocab = st_model_config(m)->vocab;
    st_engine_t *e[NE];
    uint32_t *tok[NE], *ids[NE], alone[DEC];
    float *lg[NE], *lone = malloc(sizeof(float) * vocab);
    st_engine_stats_t st[NE], s1;

    (void)state;
    for (int i = 0; i < NE; i++) {
        e[i] = engine(m);
        tok[i] = make_tokens(len[i], vocab, (uint32_t)i + 1);
        ids[i] = calloc(DEC, sizeof(uint32_t));
        lg[i] = malloc(sizeof(float) * vocab);
        assert_non_null(ids[i] && lg[i]);
    }
    assert_int_equal(
        st_engine_run_batch(e, NE, (const uint32_t *const *)tok, len, DEC, lg, ids, st), ST_OK);
    for (int i = 0; i < NE; i++) {
        /* The same engine again, alone: the run starts from scratch (no cluster). */
        assert_int_equal(st_engine_run(e[i], tok[i], len[i], DEC, lone, alone, &s1), ST_OK);
        assert_memory_equal(lone, lg[i], sizeof(float) * vocab);
        assert_memory_equal(alone, ids[i], sizeof(alone));
        assert_int_equal(st[i].computed_tokens, s1.computed_tokens);
        assert_true(st[i].decode_us > 0);
        /* ... and after the batch the sequence holds the whole conversation. */
        assert_int_equal(st_seq_length(e[i]->seq), len[i] + DEC);
    }
    /* A batch of one is st_engine_run. */
    {
        uint32_t one[DEC];
        uint32_t *op[1] = {one};
        float *lp[1] = {lg[0]};
        size_t n1 = len[2];
        const uint32_t *tp[1] = {tok[2]};

        assert_int_equal(st_engine_run_batch(&e[0], 1, tp, &n1, DEC, lp, op, NULL), ST_OK);
        assert_int_equal(st_engine_run(e[1], tok[2], len[2], DEC, lone, alone, NULL), ST_OK);
        assert_memory_equal(one, alone, sizeof(one));
        assert_memory_equal(lg[0], lone, sizeof(float) * vocab);
    }
    for (int i = 0; i < NE; i++) {
        st_engine_free(e[i]);
        free(tok[i]), free(ids[i]), free(lg[i]);
    }
    free(lone);
    st_model_free(m);
}

/* st_seq_forward_batch over sequences at different lengths equals st_seq_forward of each. */
static void test_forward_batch(void **state)
{
    st_model_t *m = model();
    uint32_t vocab = st_model_config(m)->vocab, *t = make_tokens(300, vocab, 9);
    st_seq_t *a[3], *b[3];
    float *la[3], *lb[3];
    uint32_t next[3] = {5, 6, 7};

    (void)state;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(st_seq_create(m, &a[i]), ST_OK);
        assert_int_equal(st_seq_create(m, &b[i]), ST_OK);
        la[i] = malloc(sizeof(float) * vocab);
        lb[i] = malloc(sizeof(float) * vocab);
        for (size_t k = 0; k < 40 + 97 * (size_t)i; k++) {
            assert_int_equal(st_seq_forward(a[i], t[k], NULL), ST_OK);
            assert_int_equal(st_seq_forward(b[i], t[k], NULL), ST_OK);
        }
    }
    for (int step = 0; step < 3; step++) {
        assert_int_equal(st_seq_forward_batch(a, 3, next, la), ST_OK);
        for (int i = 0; i < 3; i++) {
            assert_int_equal(st_seq_forward(b[i], next[i], lb[i]), ST_OK);
            assert_memory_equal(la[i], lb[i], sizeof(float) * vocab);
            assert_int_equal(st_seq_length(a[i]), st_seq_length(b[i]));
            next[i] = (next[i] * 7 + 3) % vocab;
        }
    }
    /* Refused: a sequence twice, a token out of range (nothing advanced). */
    {
        st_seq_t *twice[2] = {a[0], a[0]};
        uint32_t bad[3] = {1, vocab, 2};
        size_t l0 = st_seq_length(a[0]), l2 = st_seq_length(a[2]);

        assert_int_equal(st_seq_forward_batch(twice, 2, next, NULL), ST_ERR_INVALID);
        assert_int_equal(st_seq_forward_batch(a, 3, bad, NULL), ST_ERR_INVALID);
        assert_int_equal(st_seq_length(a[0]), l0);
        assert_int_equal(st_seq_length(a[2]), l2);
    }
    for (int i = 0; i < 3; i++) {
        st_seq_free(a[i]), st_seq_free(b[i]);
        free(la[i]), free(lb[i]);
    }
    free(t);
    st_model_free(m);
}

static void test_batch_refused(void **state)
{
    st_model_t *m = model(), *m2 = model();
    st_engine_t *e[2] = {engine(m), engine(m2)}, *same[2];
    uint32_t t[8] = {1, 2, 3, 4, 5, 6, 7, 8}, o0[4], o1[4], bad[1] = {100000};
    const uint32_t *tp[2] = {t, t}, *bp[2] = {t, bad};
    uint32_t *op[2] = {o0, o1};
    size_t n[2] = {8, 8}, nb[2] = {8, 1};

    (void)state;
    assert_int_equal(st_engine_run_batch(e, 2, tp, n, 4, NULL, op, NULL), ST_ERR_INVALID);
    same[0] = same[1] = e[0];
    assert_int_equal(st_engine_run_batch(same, 2, tp, n, 4, NULL, op, NULL), ST_ERR_INVALID);
    assert_int_equal(st_engine_run_batch(e, 0, tp, n, 4, NULL, op, NULL), ST_ERR_INVALID);
    assert_int_equal(st_engine_run_batch(e, ST_ENGINE_BATCH_MAX + 1, tp, n, 4, NULL, op, NULL),
                     ST_ERR_INVALID);
    assert_int_equal(st_engine_run_batch(e, 2, tp, n, 4, NULL, NULL, NULL), ST_ERR_INVALID);
    {
        st_engine_t *e2[2] = {e[0], engine(m)};

        /* The second prompt refused: the first engine's run ended, both usable after. */
        assert_int_equal(st_engine_run_batch(e2, 2, bp, nb, 4, NULL, op, NULL), ST_ERR_INVALID);
        assert_int_equal(st_engine_run_batch(e2, 2, tp, n, 4, NULL, op, NULL), ST_OK);
        assert_memory_equal(o0, o1, sizeof(o0)); /* the same prompt: the same reply */
        st_engine_free(e2[1]);
    }
    st_engine_free(e[0]);
    st_engine_free(e[1]);
    st_model_free(m);
    st_model_free(m2);
}

int main(void)
{
    UNIT_RUN(cmocka_unit_test(test_batch_equals_alone), cmocka_unit_test(test_forward_batch),
             cmocka_unit_test(test_batch_refused));
}
