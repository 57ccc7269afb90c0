/*
 * test_engine_prefill.c - chunked prefill (engine/prefill.c) against the
 * token-by-token path on the CPU: the span's matrix products equal
 * en_matvec bit for bit; every shape (DSA only, KDA only, hybrid, dense and
 * MoE, top-k above the history) gives the same logits and the same KV and
 * IDX objects bit for bit whatever the chunks (the selection is causal and
 * exact), also when spans start unaligned and the sequence goes on token by
 * token; the engine's prefill_chunk is checked and a chunked turn equals a
 * token-by-token one exactly. Bad tokens leave the sequence as it was.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "en_internal.h"
#include "strata/engine.h"
#include "support/unit_main.h"
#include "support/unit_tokens.h"

static void test_matmul_bits(void **state)
{
    const int shapes[][3] = {{1, 5, 7}, {9, 128, 80}, {17, 33, 1100}, {8, 64, 512}, {3, 1, 1}};

    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        int n = shapes[s][0], in = shapes[s][1], out = shapes[s][2];
        float *W = malloc(sizeof(float) * (size_t)in * out), *X = malloc(sizeof(float) * n * in);
        float *Y = malloc(sizeof(float) * n * out), *y = malloc(sizeof(float) * out);

        assert_non_null(W && X && Y && y);
        for (int i = 0; i < in * out; i++) {
            W[i] = en_rand(3, (uint64_t)s, (uint64_t)i);
        }
        for (int i = 0; i < n * in; i++) {
            X[i] = en_rand(4, (uint64_t)s, (uint64_t)i);
        }
        en_matmul(W, X, (size_t)n, in, out, Y);
        for (int r = 0; r < n; r++) {
            en_matvec(W, X + (size_t)r * in, in, out, y);
            assert_memory_equal(y, Y + (size_t)r * out, sizeof(float) * out);
        }
        free(W);
        free(X);
        free(Y);
        free(y);
    }
}

static st_model_t *model(const char *pattern, uint32_t topk, uint32_t experts)
{
    st_model_config_t c;
    st_model_t *m;

    st_model_config_default(&c);
    strcpy(c.pattern, pattern);
    c.topk = topk;
    c.moe_experts = experts;
    c.block_tokens = 32;
    assert_int_equal(st_model_create(&c, &m), ST_OK);
    return m;
}

/*
 * Runs tok[0..n) into a fresh sequence: the first `lead` token by token,
 * then prefill spans of `chunk` tokens (0: all at once), then `tail` more
 * tokens token by token. Returns the sequence; lg gets the last logits.
 */
static st_seq_t *run(const st_model_t *m, const uint32_t *tok, size_t n, size_t lead, size_t chunk,
                     size_t tail, float *lg)
{
    st_seq_t *s;
    size_t i = 0;

    assert_int_equal(st_seq_create(m, &s), ST_OK);
    for (; i < lead; i++) {
        assert_int_equal(st_seq_forward(s, tok[i], i + 1 == n ? lg : NULL), ST_OK);
    }
    while (i < n - tail) {
        size_t k = chunk && chunk < n - tail - i ? chunk : n - tail - i;

        assert_int_equal(st_seq_prefill(s, tok + i, k, i + k == n ? lg : NULL), ST_OK);
        i += k;
    }
    for (; i < n; i++) {
        assert_int_equal(st_seq_forward(s, tok[i], i + 1 == n ? lg : NULL), ST_OK);
    }
    assert_int_equal(st_seq_length(s), n);
    assert_memory_equal(s->tokens, tok, sizeof(uint32_t) * n);
    return s;
}

/* Bytes of every full block's KV and IDX objects of DSA layer l of both sequences. */
static int objects_equal(const st_model_t *m, const st_seq_t *a, const st_seq_t *b, size_t blocks)
{
    size_t kb = en_kv_bytes(m), ib = en_idx_bytes(m);
    uint8_t *x = malloc(kb + ib), *y = malloc(kb + ib);
    int eq = 1;

    assert_non_null(x && y);
    for (int l = 0; eq && l < m->n_dsa; l++) {
        for (size_t blk = 0; eq && blk < blocks; blk++) {
            en_export_kv(a, l, blk, x);
            en_export_idx(a, l, blk, x + kb);
            en_export_kv(b, l, blk, y);
            en_export_idx(b, l, blk, y + kb);
            eq = memcmp(x, y, kb + ib) == 0;
        }
    }
    free(x);
    free(y);
    return eq;
}

/* Every shape: chunked equals token by token bit for bit, logits and objects. */
static void test_exact(void **state)
{
    const char *patterns[] = {"DD", "KDKD", "KKK", "DKKD", "KDKD"};
    const uint32_t topk[] = {48, 64, 32, 500, 64}, experts[] = {4, 4, 0, 3, 0};
    const size_t n = 300;
    const size_t plans[][3] = {{0, 0, 0}, {0, 32, 0}, {45, 37, 10}, {1, 100, 1}, {31, 64, 20}};

    for (int i = 0; i < 5; i++) {
        st_model_t *m = model(patterns[i], topk[i], experts[i]);
        uint32_t *tok = make_tokens(n, 512, (uint32_t)i + 7);
        float ref[512], lg[512];
        st_seq_t *r = run(m, tok, n, n, 0, 0, ref);

        for (size_t p = 0; p < sizeof(plans) / sizeof(plans[0]); p++) {
            st_seq_t *s = run(m, tok, n, plans[p][0], plans[p][1], plans[p][2], lg);

            assert_memory_equal(lg, ref, sizeof(lg));
            assert_true(objects_equal(m, r, s, n / 32));
            if (m->n_kda > 0) {
                assert_memory_equal(s->kda, r->kda,
                                    sizeof(float) * (size_t)m->n_kda * m->cfg.kda_heads *
                                        m->cfg.kda_head_dim * m->cfg.kda_head_dim);
            }
            st_seq_free(s);
        }
        st_seq_free(r);
        free(tok);
        st_model_free(m);
    }
}

static void test_refused(void **state)
{
    st_model_t *m = model("KDKD", 64, 4);
    uint32_t *tok = make_tokens(100, 512, 3);
    st_seq_t *s;

    assert_int_equal(st_seq_create(m, &s), ST_OK);
    assert_int_equal(st_seq_prefill(s, tok, 40, NULL), ST_OK);
    tok[50] = 512; /* out of range */
    assert_int_equal(st_seq_prefill(s, tok + 40, 20, NULL), ST_ERR_INVALID);
    assert_int_equal(st_seq_length(s), 40);
    assert_int_equal(st_seq_prefill(s, tok, 0, NULL), ST_ERR_INVALID);
    assert_int_equal(st_seq_prefill(NULL, tok, 1, NULL), ST_ERR_INVALID);
    assert_int_equal(st_seq_prefill(s, NULL, 1, NULL), ST_ERR_INVALID);
    assert_int_equal(st_seq_length(s), 40);
    st_seq_free(s);
    free(tok);
    st_model_free(m);
}

static st_engine_t *engine(const st_model_t *m, uint32_t chunk, st_status_t want)
{
    st_engine_params_t p = {.field_mask = ST_ENGINE_FIELD_PREFILL_CHUNK, .prefill_chunk = chunk};
    st_engine_t *e = NULL;

    assert_int_equal(st_engine_create(m, &p, &e), want);
    return e;
}

/* The engine's prefill_chunk: checked; chunked turns equal the token-by-token one. */
static void test_engine_chunk(void **state)
{
    st_model_t *m = model("KDKD", 64, 4);
    const size_t n = 700;
    uint32_t *tok = make_tokens(n, 512, 11), ids[3][8];
    const uint32_t chunks[] = {1, 64, 1024};
    float lg[3][512];

    st_engine_free(engine(m, 0, ST_OK)); /* the default */
    engine(m, 48, ST_ERR_INVALID);       /* not a multiple of 32 */
    engine(m, ST_ENGINE_PREFILL_MAX + 32, ST_ERR_INVALID);
    for (int i = 0; i < 3; i++) {
        st_engine_t *e = engine(m, chunks[i], ST_OK);
        st_engine_stats_t st;

        assert_int_equal(st_engine_run(e, tok, n, 8, lg[i], ids[i], &st), ST_OK);
        assert_int_equal(st.computed_tokens, n);
        st_engine_free(e);
    }
    for (int i = 1; i < 3; i++) {
        assert_memory_equal(lg[i], lg[0], sizeof(lg[0]));
        assert_memory_equal(ids[i], ids[0], sizeof(ids[0]));
    }
    free(tok);
    st_model_free(m);
}

int main(int argc, char **argv)
{
    UNIT_RUN(cmocka_unit_test(test_matmul_bits), cmocka_unit_test(test_exact),
             cmocka_unit_test(test_refused), cmocka_unit_test(test_engine_chunk));
}
