/*
 * test_stratad_tenants.c - real stratad processes and tenants: with three
 * namespaces of two tenants the process-wide DRAM limit is one series on
 * /metrics and once in /stats (not once per namespace: 768 MiB before), and
 * each tenant's quota and use per resource are on both; with quotas from
 * the tenants file and an SSD tier, over gRPC: puts past the memory quota
 * evict the tenant's own objects, a pin past the pins quota and a durable
 * write past the ssd quota are refused (the latter with the numbers), and
 * the SSD bytes are counted; a SIGHUP reload hands the new quotas to the
 * store, and a tenant it removes keeps a 1-byte memory quota.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include <grpc/status.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "cluster.h"
#include "grpc_conn.h"
#include "srpc.h"
#include "strata.pb-c.h"
#include "tenants.h"
#include "stratad_arg.h"

#define LIMIT   (256.0 * 1024 * 1024)
#define TOKEN_A "stratad-tenants-acme-token-0123456789"
#define TOKEN_B "stratad-tenants-blue-token-9876543210"

static const char *stratad_path;

/* Hello as tenant, with token (NULL: none). */
static void hello_as(gc_conn_t *c, const char *addr, const char *tenant, const char *model,
                     const char *token)
{
    Strata__V1__HelloResponse *resp = gc_hello(c, addr, tenant, model, token);

    protobuf_c_message_free_unpacked(&resp->base, NULL);
}

static void hello(gc_conn_t *c, const char *addr, const char *tenant, const char *model)
{
    hello_as(c, addr, tenant, model, NULL);
}

/* Rewrites the tenants file of s with fields[i] for its tenants (NULL: the
 * tenant is left out), sends SIGHUP, and waits until /metrics on mport
 * shows series == want. */
static void reload_until(tt_set_t *s, const char *const *fields, pid_t pid, int mport,
                         const char *series, double want)
{
    static const char *const names[2] = {"acme", "blue"};
    static const char *const tokens[2] = {TOKEN_A, TOKEN_B};
    const char *kept_names[2], *kept_tokens[2], *kept_fields[2];
    char path[sizeof(s->path)];
    tt_set_t next;
    size_t n = 0;
    double got = -1;

    for (size_t i = 0; i < 2; i++) {
        if (fields[i] != NULL) {
            kept_names[n] = names[i];
            kept_tokens[n] = tokens[i];
            kept_fields[n++] = fields[i];
        }
    }
    assert_int_equal(
        tt_prepare_fields(&next, stratad_path, kept_names, kept_tokens, kept_fields, n, "k3"), 0);
    assert_true(next.per_tenant);
    snprintf(path, sizeof(path), "%s", s->path);
    assert_int_equal(rename(next.path, path), 0);
    assert_int_equal(kill(pid, SIGHUP), 0);
    for (int i = 0; i < 100 && got != want; i++) {
        usleep(50000);
        got = tc_metric(mport, series);
    }
    print_message("%s after the reload: %.0f\n", series, got);
    assert_true(got == want);
}

/* Puts one object of len bytes (kind, durable) as root block i; returns the
 * call's status (err filled), *key_status the object's. */
static st_status_t put_one(gc_conn_t *c, int i, size_t len, int kind, int durable, int *key_status,
                           srpc_error_t *err)
{
    Strata__V1__PutRequest req = STRATA__V1__PUT_REQUEST__INIT;
    Strata__V1__InlineObject obj = STRATA__V1__INLINE_OBJECT__INIT, *op = &obj;
    Strata__V1__ObjectKey key = STRATA__V1__OBJECT_KEY__INIT;
    Strata__V1__BlockLink link = STRATA__V1__BLOCK_LINK__INIT, *lp = &link;
    Strata__V1__PutResponse *resp = NULL;
    uint8_t h[16] = {0}, *data = calloc(1, len);
    st_status_t st;

    assert_non_null(data);
    memcpy(h, &i, sizeof(i));
    h[15] = 0x5a;
    data[0] = (uint8_t)i;
    link.hash.data = h;
    link.hash.len = 16;
    link.parent_hash.data = c->seed.b;
    link.parent_hash.len = 16;
    key.block_hash.data = h;
    key.block_hash.len = 16;
    key.kind = kind;
    obj.key = &key;
    obj.data.data = data;
    obj.data.len = len;
    obj.checksum = XXH3_64bits(data, len);
    req.namespace_id = c->ns;
    req.objects = &op;
    req.n_objects = 1;
    req.links = &lp;
    req.n_links = 1;
    req.durable = durable;
    st = gc_call(c, SRPC_CACHE_PUT, &req, (void **)&resp, err);
    if (st == ST_OK) {
        *key_status = resp->status[0];
        protobuf_c_message_free_unpacked(&resp->base, NULL);
    }
    free(data);
    return st;
}

/* Pins root blocks first .. first+n-1 in one call; returns the call's
 * status (err filled) and, on ST_OK, the first block's key status. */
static st_status_t pin_blocks(gc_conn_t *c, int first, int n, int *ks, srpc_error_t *err)
{
    Strata__V1__PinRequest req = STRATA__V1__PIN_REQUEST__INIT;
    Strata__V1__PinResponse *resp = NULL;
    uint8_t h[4][16] = {{0}};
    st_status_t st;

    assert_true(n <= 4);
    for (int k = 0; k < n; k++) {
        int i = first + k;

        memcpy(h[k], &i, sizeof(i));
        h[k][15] = 0x5a;
    }
    req.namespace_id = c->ns;
    req.block_hashes.data = h[0];
    req.block_hashes.len = 16 * (size_t)n;
    st = gc_call(c, SRPC_CACHE_PIN, &req, (void **)&resp, err);
    if (st == ST_OK) {
        assert_int_equal(resp->n_status, (size_t)n);
        *ks = resp->status[0];
        protobuf_c_message_free_unpacked(&resp->base, NULL);
    }
    return st;
}

/* Puts n KV objects of len bytes, each a root block of its own. */
static void put_roots(gc_conn_t *c, int n, size_t len)
{
    for (int i = 0; i < n; i++) {
        srpc_error_t err;
        int ks = -1;

        assert_int_equal(put_one(c, i, len, STRATA__V1__OBJECT_KIND__KV, 0, &ks, &err), ST_OK);
        assert_int_equal(ks, STRATA__V1__KEY_STATUS__KEY_OK);
    }
}

/* How many sample lines of /metrics start with prefix. */
static int count_lines(int port, const char *prefix)
{
    char *page = tc_http_get(port, "/metrics"), *p;
    int n = 0;

    assert_non_null(page);
    for (p = page; (p = strstr(p, prefix)) != NULL; p++) {
        n += p[-1] == '\n';
    }
    free(page);
    return n;
}

static void test_limit_once_and_tenants(void **state)
{
    int mport = tc_free_port();
    char extra[128], *stats;
    tc_cluster_t cl;
    gc_conn_t a1, a2, b;
    double used_a;

    (void)state;
    snprintf(extra, sizeof(extra), "--memory-limit 256M --metrics-listen 127.0.0.1:%d", mport);
    assert_int_equal(tc_start(&cl, stratad_path, 1, extra), 0);
    hello(&a1, cl.node[0].addr, "acme", "k3");
    hello(&a2, cl.node[0].addr, "acme", "k3-vl");
    hello(&b, cl.node[0].addr, "blue", "k3");
    put_roots(&a1, 8, 100000);
    put_roots(&a2, 3, 50000);
    put_roots(&b, 5, 70000);

    /* The DRAM limit: one series, without a namespace label. */
    assert_int_equal(count_lines(mport, "strata_tier_limit_bytes{"), 1);
    assert_true(tc_metric(mport, "strata_tier_limit_bytes{tier=\"dram\"}") == LIMIT);
    assert_true(tc_metric(mport, "strata_tier_limit_bytes{namespace=\"acme/k3\",tier=\"dram\"}") ==
                -1);
    stats = tc_http_get(mport, "/stats");
    assert_non_null(stats);
    assert_non_null(strstr(stats, "\"limit_bytes\":268435456}"));
    assert_null(strstr(stats, "\"limit_bytes\":805306368}"));

    /* Tenants: no quota set (0), their namespaces, their DRAM. */
    assert_true(tc_metric(mport, "strata_tenant_used{tenant=\"acme\",resource=\"namespaces\"}") ==
                2);
    assert_true(tc_metric(mport, "strata_tenant_used{tenant=\"blue\",resource=\"namespaces\"}") ==
                1);
    assert_true(
        tc_metric(mport, "strata_tenant_quota{tenant=\"acme\",resource=\"memory_bytes\"}") == 0);
    used_a = tc_metric(mport, "strata_tenant_used{tenant=\"acme\",resource=\"memory_bytes\"}");
    assert_true(used_a >= 8 * 100000 + 3 * 50000);
    assert_true(
        used_a ==
        tc_metric(mport, "strata_tier_used_bytes{namespace=\"acme/k3\",tier=\"dram\"}") +
            tc_metric(mport, "strata_tier_used_bytes{namespace=\"acme/k3-vl\",tier=\"dram\"}"));
    assert_non_null(
        strstr(stats, "\"tenants\":{\"acme\":{\"memory_bytes\":{\"quota\":0,\"used\":"));
    assert_non_null(strstr(stats, "\"namespaces\":{\"quota\":0,\"used\":2}"));
    free(stats);

    srpc_channel_close(a1.ch);
    srpc_channel_close(a2.ch);
    srpc_channel_close(b.ch);
    tc_stop_all(&cl);
}

static void test_quotas_over_grpc(void **state)
{
    static const char *const names[2] = {"acme", "blue"};
    static const char *const tokens[2] = {TOKEN_A, TOKEN_B};
    static const char *const fields[2] = {"memory=1M pins=2 ssd=4K", "sessions=7"};
    static const char *const fields2[2] = {"memory=1M pins=3 ssd=4K", "sessions=7"};
    static const char *const fields3[2] = {NULL, "sessions=9"};
    int mport = tc_free_port(), ks = -1;
    char dir[] = "/tmp/strata-tenants-XXXXXX", extra[512], cmd[600];
    double used;
    tc_cluster_t cl;
    tt_set_t tns;
    srpc_error_t err;
    gc_conn_t a;

    (void)state;
    assert_non_null(mkdtemp(dir));
    assert_int_equal(tt_prepare_fields(&tns, stratad_path, names, tokens, fields, 2, "k3"), 0);
    assert_true(tns.per_tenant);
    snprintf(
        extra, sizeof(extra),
        "--memory-limit 256M --metrics-listen 127.0.0.1:%d --data-dir %s --ssd-sync none %s %s",
        mport, dir, tns.flags, tns.shared);
    assert_int_equal(tc_start(&cl, stratad_path, 1, extra), 0);
    /* The quotas of the tenants file are the store's from the start, also
     * of a tenant with no namespace yet; namespaces has its default, 8. */
    assert_true(tc_metric(mport, "strata_tenant_quota{tenant=\"blue\",resource=\"sessions\"}") ==
                7);
    assert_true(tc_metric(mport, "strata_tenant_quota{tenant=\"blue\",resource=\"namespaces\"}") ==
                8);
    hello_as(&a, cl.node[0].addr, "acme", "k3", TOKEN_A);

    /* 1.5 MB of KV puts into a 1 MiB quota: every put succeeds, the oldest
     * go, the tenant stays within its quota. */
    for (int i = 0; i < 15; i++) {
        assert_int_equal(put_one(&a, i, 100000, STRATA__V1__OBJECT_KIND__KV, 0, &ks, &err), ST_OK);
        assert_int_equal(ks, STRATA__V1__KEY_STATUS__KEY_OK);
    }
    used = tc_metric(mport, "strata_tenant_used{tenant=\"acme\",resource=\"memory_bytes\"}");
    assert_true(used > 0 && used <= 1024.0 * 1024);
    assert_true(
        tc_metric(mport, "strata_tenant_quota{tenant=\"acme\",resource=\"memory_bytes\"}") ==
        1024.0 * 1024);

    /* Pins: the quota is 2. A call of three is refused with the numbers and
     * leaves nothing pinned; one, then two more, the second refused. */
    assert_int_equal(pin_blocks(&a, 12, 3, &ks, &err), ST_ERR_EXHAUSTED);
    assert_int_equal(err.grpc_code, GRPC_STATUS_RESOURCE_EXHAUSTED);
    assert_non_null(strstr(err.message, "block_hashes[2]: tenant acme: pins quota 2, in use 2, "
                                        "asked 1"));
    assert_true(tc_metric(mport, "strata_tenant_used{tenant=\"acme\",resource=\"pins\"}") == 0);
    assert_int_equal(pin_blocks(&a, 14, 1, &ks, &err), ST_OK);
    assert_int_equal(ks, STRATA__V1__KEY_STATUS__KEY_OK);
    assert_int_equal(pin_blocks(&a, 13, 1, &ks, &err), ST_OK);
    assert_int_equal(pin_blocks(&a, 12, 1, &ks, &err), ST_ERR_EXHAUSTED);
    assert_true(tc_metric(mport, "strata_tenant_used{tenant=\"acme\",resource=\"pins\"}") == 2);

    /* SSD: a durable KDA object of 3000 bytes (3024 with its prefix) fits
     * 4 KiB; a second does not, and the error says why. */
    assert_int_equal(put_one(&a, 100, 3000, STRATA__V1__OBJECT_KIND__KDA, 1, &ks, &err), ST_OK);
    assert_int_equal(ks, STRATA__V1__KEY_STATUS__KEY_OK);
    assert_true(tc_metric(mport, "strata_tenant_used{tenant=\"acme\",resource=\"ssd_bytes\"}") ==
                3024);
    assert_int_equal(put_one(&a, 101, 3000, STRATA__V1__OBJECT_KIND__KDA, 1, &ks, &err),
                     ST_ERR_EXHAUSTED);
    assert_int_equal(err.grpc_code, GRPC_STATUS_RESOURCE_EXHAUSTED);
    print_message("refused: %s\n", err.message);
    assert_non_null(strstr(err.message, "tenant acme: ssd quota 4.0 KiB, in use 3.0 KiB, asked "
                                        "3.0 KiB"));

    /* A reload hands the new quotas to the store: a third pin fits now. */
    reload_until(&tns, fields2, cl.node[0].pid, mport,
                 "strata_tenant_quota{tenant=\"acme\",resource=\"pins\"}", 3);
    assert_int_equal(pin_blocks(&a, 12, 1, &ks, &err), ST_OK);
    assert_int_equal(ks, STRATA__V1__KEY_STATUS__KEY_OK);
    /* A reload that removes acme: its calls are refused, its memory quota is
     * 1 byte (evicted first), blue's quotas follow the file. */
    reload_until(&tns, fields3, cl.node[0].pid, mport,
                 "strata_tenant_quota{tenant=\"acme\",resource=\"memory_bytes\"}", 1);
    assert_true(tc_metric(mport, "strata_tenant_quota{tenant=\"blue\",resource=\"sessions\"}") ==
                9);
    assert_int_equal(pin_blocks(&a, 11, 1, &ks, &err), ST_ERR_UNAUTHENTICATED);

    srpc_channel_close(a.ch);
    tc_stop_all(&cl);
    tt_cleanup(&tns);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

TM_STRATAD_MAIN("test_stratad_tenants", "PATH-TO-STRATAD", &stratad_path,
                cmocka_unit_test(test_limit_once_and_tenants),
                cmocka_unit_test(test_quotas_over_grpc))
