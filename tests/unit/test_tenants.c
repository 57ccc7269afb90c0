/*
 * test_tenants.c - cached/tenants.c: the tenants file (fields, defaults,
 * comments, every error with its line), token lookup, a swap that marks
 * dropped tenants, the cluster credential, secrets from files and the
 * environment.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "support/tenants.h"
#include "tenants.h"

static char path[64];

static void hash_of(const char *token, char *out)
{
    assert_int_equal(tt_token_hash(token, out), 0);
}

static void write_file(const char *text)
{
    FILE *f = fopen(path, "w");

    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void count_tenant(void *arg, const cd_tn_tenant_t *t)
{
    (void)t;
    (*(int *)arg)++;
}

static void test_parse_fields_and_defaults(void **state)
{
    char ha[80], hb[80], text[1024];
    cd_tn_table_t *t = NULL;
    cd_tenants_t tns;
    const cd_tn_tenant_t *a, *b;
    const cd_tn_quota_t *q;

    (void)state;
    hash_of("token-a", ha);
    hash_of("token-b", hb);
    snprintf(text, sizeof(text),
             "# comment line\n"
             "\n"
             "  acme %s models=k3,k3-vl cert=acme-client memory=64G ssd=1T sessions=100000 "
             "pins=10000 "
             "namespaces=3 leases=7 reservations=9   # trailing comment\n"
             "beta\t%s\n",
             ha, hb);
    write_file(text);
    assert_int_equal(cd_tn_load(path, &t), ST_OK);
    assert_int_equal(t->tt_n, 2);
    cd_tn_init(&tns, t);
    a = cd_tn_find_token(&tns, "token-a");
    b = cd_tn_find_token(&tns, "token-b");
    assert_non_null(a);
    assert_non_null(b);
    assert_string_equal(a->tn_name, "acme");
    assert_string_equal(b->tn_name, "beta");
    assert_null(cd_tn_find_token(&tns, "token-c"));
    assert_null(cd_tn_find_token(&tns, ""));
    assert_null(cd_tn_find_token(&tns, NULL));
    q = cd_tn_quota(a);
    assert_int_equal(q->memory, 64ull << 30);
    assert_int_equal(q->ssd, 1ull << 40);
    assert_int_equal(q->sessions, 100000);
    assert_int_equal(q->pins, 10000);
    assert_int_equal(q->namespaces, 3);
    assert_int_equal(q->leases, 7);
    assert_int_equal(q->reservations, 9);
    assert_true(cd_tn_model_allowed(a, "k3"));
    assert_true(cd_tn_model_allowed(a, "k3-vl"));
    assert_false(cd_tn_model_allowed(a, "k3-v"));
    /* Absent fields: any model, unlimited, namespaces CD_TN_DEFAULT_NAMESPACES. */
    q = cd_tn_quota(b);
    assert_int_equal(q->memory, 0);
    assert_int_equal(q->sessions, 0);
    assert_int_equal(q->namespaces, CD_TN_DEFAULT_NAMESPACES);
    assert_true(cd_tn_model_allowed(b, "anything"));
    assert_true(cd_tn_find_name(&tns, "beta") == b);
    {
        int n = 0;

        cd_tn_foreach(&tns, count_tenant, &n);
        assert_int_equal(n, 2);
    }
    assert_null(cd_tn_find_name(&tns, "gamma"));
    /* cert=: the CN of a client certificate names the tenant; none for beta. */
    assert_true(cd_tn_find_cert(&tns, "acme-client") == a);
    assert_null(cd_tn_find_cert(&tns, "acme"));
    assert_null(cd_tn_find_cert(&tns, "beta"));
    assert_null(cd_tn_find_cert(&tns, ""));
    assert_null(cd_tn_find_cert(&tns, NULL));
    cd_tn_free_all(&tns);
}

/* Each bad file is refused (ST_ERR_INVALID); the log names file:line (seen in the output). */
static void test_bad_files(void **state)
{
    char h[80], text[1024];
    cd_tn_table_t *t = NULL;
    const char *bad[] = {
        "acme\n",                /* no hash */
        "acme md5:0123\n",       /* not sha256: */
        "acme sha256:0123\n",    /* short */
        "acme %s models=\n",     /* no model */
        "acme %s memory=lots\n", /* not a size */
        "acme %s pins=-1\n",     /* not a count */
        "acme %s pins=12x\n",    /* not a count */
        "acme %s colour=blue\n", /* unknown field */
        "acme %s nokeyvalue\n",  /* not key=value */
        "acme %s\nacme %s\n",    /* a name twice (same hash too) */
    };

    (void)state;
    hash_of("token-a", h);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snprintf(text, sizeof(text), bad[i], h, h);
        write_file(text);
        t = NULL;
        assert_int_equal(cd_tn_load(path, &t), ST_ERR_INVALID);
        assert_null(t);
    }
    /* Non-hex digits in a hash of the right length. */
    snprintf(text, sizeof(text), "acme sha256:%064d\n", 0);
    text[strlen("acme sha256:")] = 'g';
    write_file(text);
    assert_int_equal(cd_tn_load(path, &t), ST_ERR_INVALID);
    /* Two tenants, one token. */
    snprintf(text, sizeof(text), "acme %s\nbeta %s\n", h, h);
    write_file(text);
    assert_int_equal(cd_tn_load(path, &t), ST_ERR_INVALID);
    /* Two tenants, one certificate CN; an empty cert=. */
    {
        char hb[80];

        hash_of("token-b", hb);
        snprintf(text, sizeof(text), "acme %s cert=acme\nbeta %s cert=acme\n", h, hb);
        write_file(text);
        assert_int_equal(cd_tn_load(path, &t), ST_ERR_INVALID);
        snprintf(text, sizeof(text), "acme %s cert=\n", h);
        write_file(text);
        assert_int_equal(cd_tn_load(path, &t), ST_ERR_INVALID);
    }
    /* No file. */
    assert_int_equal(cd_tn_load("/nonexistent/strata-tenants", &t), ST_ERR_IO);
    /* An empty file is an empty table. */
    write_file("# nobody yet\n");
    assert_int_equal(cd_tn_load(path, &t), ST_OK);
    assert_int_equal(t->tt_n, 0);
    cd_tn_table_free(t);
}

static void test_swap_marks_dropped(void **state)
{
    char ha[80], hb[80], text[512];
    cd_tn_table_t *t1 = NULL, *t2 = NULL;
    cd_tenants_t tns;
    const cd_tn_tenant_t *a, *b, *a2;

    (void)state;
    hash_of("token-a", ha);
    hash_of("token-b", hb);
    snprintf(text, sizeof(text), "acme %s\nbeta %s\n", ha, hb);
    write_file(text);
    assert_int_equal(cd_tn_load(path, &t1), ST_OK);
    cd_tn_init(&tns, t1);
    a = cd_tn_find_token(&tns, "token-a");
    b = cd_tn_find_token(&tns, "token-b");
    snprintf(text, sizeof(text), "acme %s models=x\n", ha);
    write_file(text);
    assert_int_equal(cd_tn_load(path, &t2), ST_OK);
    cd_tn_swap(&tns, t2);
    /* The old tenants stay valid; the dropped one is marked. */
    assert_false(atomic_load(&a->tn_removed));
    assert_true(atomic_load(&b->tn_removed));
    assert_null(cd_tn_find_token(&tns, "token-b"));
    a2 = cd_tn_find_token(&tns, "token-a");
    assert_non_null(a2);
    assert_false(cd_tn_model_allowed(a2, "y"));
    /* A new token for acme (a leaked one revoked): what the old one authenticated goes. */
    {
        cd_tn_table_t *t3 = NULL;

        hash_of("token-a2", ha);
        snprintf(text, sizeof(text), "acme %s\n", ha);
        write_file(text);
        assert_int_equal(cd_tn_load(path, &t3), ST_OK);
        cd_tn_swap(&tns, t3);
        assert_true(atomic_load(&a2->tn_removed));
        assert_null(cd_tn_find_token(&tns, "token-a"));
        assert_non_null(cd_tn_find_token(&tns, "token-a2"));
    }
    cd_tn_free_all(&tns);
}

static void test_peer_token_and_secrets(void **state)
{
    char tok[65], want[65];
    unsigned char mac[32];
    unsigned int n = 0;
    char *v = NULL;

    (void)state;
    assert_int_equal(cd_tn_peer_token("a-cluster-secret-of-16+", tok), ST_OK);
    assert_non_null(HMAC(EVP_sha256(), "a-cluster-secret-of-16+", 23,
                         (const unsigned char *)"strata-peer-v1", 14, mac, &n));
    for (int i = 0; i < 32; i++) {
        sprintf(want + 2 * i, "%02x", mac[i]);
    }
    assert_string_equal(tok, want);

    /* The environment, when nothing else is set. */
    setenv("STRATA_TEST_SECRET", "from-env", 1);
    assert_int_equal(cd_tn_read_secret(&v, "", "STRATA_TEST_SECRET", "auth_token"), ST_OK);
    assert_string_equal(v, "from-env");
    /* The value set wins over the environment. */
    free(v);
    v = strdup("from-config");
    assert_int_equal(cd_tn_read_secret(&v, NULL, "STRATA_TEST_SECRET", "auth_token"), ST_OK);
    assert_string_equal(v, "from-config");
    /* A value and a file both: refused. */
    write_file("from-file\n");
    assert_int_equal(cd_tn_read_secret(&v, path, "STRATA_TEST_SECRET", "auth_token"),
                     ST_ERR_INVALID);
    /* The file wins over the environment; its newline is not part of it. */
    free(v);
    v = strdup("");
    assert_int_equal(cd_tn_read_secret(&v, path, "STRATA_TEST_SECRET", "auth_token"), ST_OK);
    assert_string_equal(v, "from-file");
    /* An empty file or no file. */
    free(v);
    v = strdup("");
    write_file("\n");
    assert_int_equal(cd_tn_read_secret(&v, path, NULL, "auth_token"), ST_ERR_INVALID);
    assert_int_equal(cd_tn_read_secret(&v, "/nonexistent/secret", NULL, "auth_token"), ST_ERR_IO);
    assert_string_equal(v, "");
    free(v);
    unsetenv("STRATA_TEST_SECRET");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_fields_and_defaults),
        cmocka_unit_test(test_bad_files),
        cmocka_unit_test(test_swap_marks_dropped),
        cmocka_unit_test(test_peer_token_and_secrets),
    };
    int rc;

    snprintf(path, sizeof(path), "/tmp/strata-test-tenants-%d", (int)getpid());
    rc = cmocka_run_group_tests(tests, NULL, NULL);
    unlink(path);
    return rc;
}
