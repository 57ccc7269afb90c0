/*
 * test_engine_model.c - the reference hybrid model on its own: weights and
 * logits are a function of the seed, MoE routing weights sum to one over the
 * top experts, a sequence rebuilt from its serialised block objects and KDA
 * checkpoint continues with exactly the logits of one never interrupted,
 * and bad shapes, tokens and objects are refused.
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
#include "support/unit_main.h"
#include "support/unit_tokens.h"

/* Runs tokens through a fresh sequence; returns the last token's logits. */
static float *run(const st_model_t *m, const uint32_t *tok, size_t n)
{
    st_seq_t *s;
    float *lg = malloc(sizeof(float) * st_model_config(m)->vocab);

    assert_non_null(lg);
    assert_int_equal(st_seq_create(m, &s), ST_OK);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(st_seq_forward(s, tok[i], i + 1 == n ? lg : NULL), ST_OK);
    }
    assert_int_equal(st_seq_length(s), n);
    st_seq_free(s);
    return lg;
}

static void test_determinism(void **state)
{
    st_model_config_t c;
    st_model_t *a, *b, *other;
    uint32_t *tok;
    float *la, *lb, *lo;
    size_t n = 200;
    double diff = 0.0;

    st_model_config_default(&c);
    assert_int_equal(st_model_create(&c, &a), ST_OK);
    assert_int_equal(st_model_create(&c, &b), ST_OK);
    c.seed = 2;
    assert_int_equal(st_model_create(&c, &other), ST_OK);
    assert_true(st_model_fingerprint(a) == st_model_fingerprint(b));
    assert_true(st_model_fingerprint(a) != st_model_fingerprint(other));
    tok = make_tokens(n, 512, 1);
    la = run(a, tok, n);
    lb = run(b, tok, n);
    lo = run(other, tok, n);
    assert_memory_equal(la, lb, sizeof(float) * 512);
    for (int i = 0; i < 512; i++) {
        assert_true(isfinite(la[i]));
        diff = fmax(diff, fabs((double)la[i] - lo[i]));
    }
    assert_true(diff > 1e-3); /* another seed is another model */
    assert_true(en_rand(1, 7, 9) == en_rand(1, 7, 9));
    assert_true(en_rand(1, 7, 9) != en_rand(2, 7, 9));
    free(la);
    free(lb);
    free(lo);
    free(tok);
    st_model_free(a);
    st_model_free(b);
    st_model_free(other);
}

static void test_moe_route(void **state)
{
    float logits[8] = {0.5f, 2.0f, -1.0f, 2.0f, 0.1f, 3.0f, -4.0f, 0.0f};
    int idx[8];
    float w[8], sum = 0.0f;

    en_moe_route(logits, 8, 3, idx, w);
    assert_int_equal(idx[0], 5);
    assert_int_equal(idx[1], 1); /* a tie goes to the lower index */
    assert_int_equal(idx[2], 3);
    for (int j = 0; j < 3; j++) {
        sum += w[j];
    }
    assert_true(fabsf(sum - 1.0f) < 1e-6f);
    assert_true(w[0] > w[1] && fabsf(w[1] - w[2]) < 1e-7f);
    assert_true(fabsf(w[0] / w[1] - expf(1.0f)) < 1e-5f);
    en_moe_route(logits, 8, 1, idx, w);
    assert_int_equal(idx[0], 5);
    assert_true(w[0] == 1.0f);
}

/* Every shape runs: dense FFN, only KDA, only DSA, top-k above the history. */
static void test_shapes(void **state)
{
    const char *patterns[] = {"KDKD", "KKK", "DD", "DKKD"};
    st_model_config_t c;

    for (int i = 0; i < 4; i++) {
        st_model_t *m;
        uint32_t *tok = make_tokens(150, 100, (uint32_t)i);
        float *lg;

        st_model_config_default(&c);
        strcpy(c.pattern, patterns[i]);
        c.vocab = 100;
        c.moe_experts = i % 2 ? 0 : 3; /* dense on odd cases */
        c.moe_topk = 2;
        c.topk = i == 3 ? 500 : 32;
        c.block_tokens = 32;
        assert_int_equal(st_model_create(&c, &m), ST_OK);
        lg = run(m, tok, 150);
        for (int v = 0; v < 100; v++) {
            assert_true(isfinite(lg[v]));
        }
        free(lg);
        free(tok);
        st_model_free(m);
    }
}

static void test_invalid(void **state)
{
    st_model_config_t c;
    st_model_t *m = NULL;
    st_seq_t *s;

/* The default configuration with one change, which st_model_create refuses. */
#define REFUSED(change)                                            \
    do {                                                           \
        st_model_config_default(&c);                               \
        change;                                                    \
        assert_int_equal(st_model_create(&c, &m), ST_ERR_INVALID); \
    } while (0)
    REFUSED(strcpy(c.pattern, "KXD"));
    REFUSED(c.pattern[0] = '\0');
    REFUSED(c.block_tokens = 40);
    REFUSED(c.moe_topk = 5);
    REFUSED(c.dsa_rope = 15);
    REFUSED(c.d_model = 0);
#undef REFUSED
    assert_null(m);
    assert_int_equal(st_model_create(NULL, &m), ST_ERR_INVALID);

    st_model_config_default(&c);
    assert_int_equal(st_model_create(&c, &m), ST_OK);
    assert_int_equal(st_seq_create(m, &s), ST_OK);
    assert_int_equal(st_seq_forward(s, 512, NULL), ST_ERR_INVALID);
    assert_int_equal(st_seq_length(s), 0);
    {
        st_engine_t *e;
        st_engine_params_t p = {.field_mask = ST_ENGINE_FIELD_KDA_INTERVAL, .kda_interval = 0};
        uint32_t tok[2] = {1, 600};
        uint32_t ids[1];

        assert_int_equal(st_engine_create(m, &p, &e), ST_ERR_INVALID);
        assert_int_equal(st_engine_create(m, NULL, &e), ST_OK);
        assert_int_equal(st_engine_run(e, tok, 2, 0, NULL, NULL, NULL), ST_ERR_INVALID);
        assert_int_equal(st_engine_run(e, tok, 0, 0, NULL, NULL, NULL), ST_ERR_INVALID);
        assert_int_equal(st_engine_run(e, tok, 1, 1, NULL, NULL, NULL), ST_ERR_INVALID);
        assert_int_equal(st_engine_run(e, tok, 1, 1, NULL, ids, NULL), ST_OK);
        st_engine_free(e);
    }
    st_seq_free(s);
    st_model_free(m);
}

/*
 * The device option (docs/engine.md, "The CUDA path"): the shapes the CUDA
 * path takes, the refusals, and auto's fallback to the CPU. Needs no GPU.
 */
typedef struct misfit {
    const char *field;
    uint32_t *p;
    uint32_t bad;
} misfit_t;

static void test_device_option(void **state)
{
    misfit_t misfits[6];
    st_model_config_t c;
    st_model_t *m = NULL;
    st_engine_t *e = NULL;
    st_engine_params_t p = {.field_mask = ST_ENGINE_FIELD_DEVICE};
    uint32_t *tok = make_tokens(20, 512, 9);
    float *lg;
    st_status_t r;

    st_model_config_gpu(&c);
    misfits[0] = (misfit_t){"dsa_latent", &c.dsa_latent, 256};
    misfits[1] = (misfit_t){"dsa_rope", &c.dsa_rope, 32};
    misfits[2] = (misfit_t){"dsa_heads", &c.dsa_heads, 96};
    misfits[3] = (misfit_t){"idx_dim", &c.idx_dim, 64};
    misfits[4] = (misfit_t){"dsa_heads", &c.dsa_heads, 32};
    misfits[5] = (misfit_t){"kda_head_dim", &c.kda_head_dim, 64};
    for (int i = 0; i < 6; i++) {
        uint32_t keep = *misfits[i].p;

        *misfits[i].p = misfits[i].bad;
        assert_int_equal(st_model_create(&c, &m), ST_OK); /* the CPU path takes it */
        assert_int_equal(en_dev_check_shape(m, 1), ST_ERR_INVALID);
        p.device = ST_ENGINE_DEVICE_CUDA;
        assert_int_equal(st_engine_create(m, &p, &e),
                         en_dev_built() ? ST_ERR_INVALID : ST_ERR_UNSUPPORTED);
        p.device = ST_ENGINE_DEVICE_AUTO;
        assert_int_equal(st_engine_create(m, &p, &e), ST_OK);
        assert_int_equal(st_engine_device_used(e), ST_ENGINE_DEVICE_CPU);
        st_engine_free(e);
        st_model_free(m);
        *misfits[i].p = keep;
    }
    /* A KDA-only model needs only the KDA head dim to fit. */
    st_model_config_default(&c);
    strcpy(c.pattern, "KK");
    c.kda_head_dim = 128;
    assert_int_equal(st_model_create(&c, &m), ST_OK);
    assert_int_equal(en_dev_check_shape(m, 0), ST_OK);
    st_model_free(m);

    /* The gpu shape fits and runs on the CPU too. */
    st_model_config_gpu(&c);
    assert_int_equal(c.dsa_latent + c.dsa_rope, 576);
    assert_int_equal(st_model_create(&c, &m), ST_OK);
    assert_int_equal(en_dev_check_shape(m, 0), ST_OK);
    lg = run(m, tok, 20);
    assert_true(isfinite(lg[0]));
    free(lg);
    p.device = ST_ENGINE_DEVICE_CUDA;
    r = st_engine_create(m, &p, &e);
    if (!en_dev_built()) {
        assert_int_equal(r, ST_ERR_UNSUPPORTED);
    } else if (r == ST_OK) { /* a machine with a GPU */
        assert_int_equal(st_engine_device_used(e), ST_ENGINE_DEVICE_CUDA);
        st_engine_free(e);
    } else {
        assert_int_equal(r, ST_ERR_UNAVAILABLE);
    }
    p.device = 7;
    assert_int_equal(st_engine_create(m, &p, &e), ST_ERR_INVALID);
    p.device = ST_ENGINE_DEVICE_CPU;
    assert_int_equal(st_engine_create(m, &p, &e), ST_OK);
    assert_int_equal(st_engine_device_used(e), ST_ENGINE_DEVICE_CPU);
    st_engine_free(e);
    st_model_free(m);
    free(tok);
}

/*
 * A sequence rebuilt from the objects of its first r blocks (KV and IDX of
 * every DSA layer, the KDA checkpoint after block r-1) gives bit-identical
 * logits to the one that computed them.
 */
static void test_objects_round_trip(void **state)
{
    st_model_config_t c;
    st_model_t *m;
    st_seq_t *full, *part;
    size_t B = 64, r = 3, n = 250;
    uint32_t *tok;
    uint8_t *kv, *ix, *kda;
    float *l_full, *l_part;

    st_model_config_default(&c);
    c.topk = 40; /* sparse: fewer rows than history */
    assert_int_equal(st_model_create(&c, &m), ST_OK);
    tok = make_tokens(n, 512, 9);
    kv = malloc(en_kv_bytes(m) * r * 2);
    ix = malloc(en_idx_bytes(m) * r * 2);
    kda = malloc(en_kda_bytes(m));
    l_full = malloc(sizeof(float) * 512);
    l_part = malloc(sizeof(float) * 512);
    assert_true(kv && ix && kda && l_full && l_part);
    assert_int_equal(en_kv_bytes(m), 64 * 80 * 4);
    assert_int_equal(en_idx_bytes(m), (64 + 2) * 32 * 4);
    assert_int_equal(en_kda_bytes(m), 32 + 2 * 2 * 32 * 32 * 4);

    assert_int_equal(st_seq_create(m, &full), ST_OK);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(st_seq_forward(full, tok[i], i + 1 == n ? l_full : NULL), ST_OK);
        if (i + 1 == r * B) {
            for (size_t b = 0; b < r; b++) {
                for (int l = 0; l < 2; l++) {
                    en_export_kv(full, l, b, kv + (b * 2 + (size_t)l) * en_kv_bytes(m));
                    en_export_idx(full, l, b, ix + (b * 2 + (size_t)l) * en_idx_bytes(m));
                }
            }
            en_export_kda(full, kda);
        }
    }
    assert_int_equal(st_seq_create(m, &part), ST_OK);
    /* Wrong sizes, positions and models are refused. */
    assert_int_equal(en_import_kv(part, 0, 0, kv, en_kv_bytes(m) - 1), ST_ERR_INVALID);
    assert_int_equal(en_import_kda(part, r * B - 64, kda, en_kda_bytes(m)), ST_ERR_CORRUPT);
    kda[27] ^= 1; /* the fingerprint */
    assert_int_equal(en_import_kda(part, r * B, kda, en_kda_bytes(m)), ST_ERR_CORRUPT);
    kda[27] ^= 1;
    for (size_t b = 0; b < r; b++) {
        for (int l = 0; l < 2; l++) {
            assert_int_equal(
                en_import_kv(part, l, b, kv + (b * 2 + (size_t)l) * en_kv_bytes(m), en_kv_bytes(m)),
                ST_OK);
            assert_int_equal(en_import_idx(part, l, b, ix + (b * 2 + (size_t)l) * en_idx_bytes(m),
                                           en_idx_bytes(m)),
                             ST_OK);
        }
    }
    assert_int_equal(en_import_kda(part, r * B, kda, en_kda_bytes(m)), ST_OK);
    en_seq_set_prefix(part, tok, r * B);
    for (size_t i = r * B; i < n; i++) {
        assert_int_equal(st_seq_forward(part, tok[i], i + 1 == n ? l_part : NULL), ST_OK);
    }
    assert_memory_equal(l_full, l_part, sizeof(float) * 512);
    st_seq_free(full);
    st_seq_free(part);
    free(kv);
    free(ix);
    free(kda);
    free(l_full);
    free(l_part);
    free(tok);
    st_model_free(m);
}

int main(void)
{
    UNIT_RUN(cmocka_unit_test(test_determinism), cmocka_unit_test(test_moe_route),
             cmocka_unit_test(test_shapes), cmocka_unit_test(test_invalid),
             cmocka_unit_test(test_objects_round_trip), cmocka_unit_test(test_device_option));
}
