/*
 * test_tenancy.c - tenants against a real stratad on loopback, with raw gRPC
 * frames: two tenants from a tenants file; no token and wrong tokens are
 * UNAUTHENTICATED before the body is parsed; a Hello for another tenant or
 * model is PERMISSION_DENIED; every call on another tenant's namespace id
 * answers exactly as an unknown id; reservation batches are bound to the
 * Hello that made them; the namespaces quota; SIGHUP reloads the file while
 * calls continue; peers authenticate with the cluster credential; a
 * non-loopback listen address without a secret or authentication refuses
 * to start.
 */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include <grpc/status.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "cluster.h"
#include "ns_probe.h"
#include "srpc.h"
#include "strata.pb-c.h"
#include "tenants.h"
#include "stratad_arg.h"

#define TOK_A  "alpha-token-0123456789"
#define TOK_B  "beta-token-9876543210"
#define TOK_C  "gamma-token-5555555555"
#define SECRET "integration-test-cluster-secret" /* what cluster.c passes */

static const char *stratad_path;
static char tenants_path[128];

/* "sha256:<hex>" of token. */
static void token_hash(const char *token, char *out)
{
    assert_int_equal(tt_token_hash(token, out), 0);
}

/* Writes the tenants file: lines of "name token fields". */
static void write_tenants(int n, const char *const *names, const char *const *tokens,
                          const char *const *fields)
{
    char tmp[160], hash[80];
    FILE *f;

    snprintf(tmp, sizeof(tmp), "%s.tmp", tenants_path);
    f = fopen(tmp, "w");
    assert_non_null(f);
    fprintf(f, "# tenants of test_tenancy\n\n");
    for (int i = 0; i < n; i++) {
        token_hash(tokens[i], hash);
        fprintf(f, "%s %s %s   # tenant %d\n", names[i], hash, fields[i], i);
    }
    fclose(f);
    assert_int_equal(rename(tmp, tenants_path), 0); /* atomically: a reload sees all or nothing */
}

static void write_ab(void)
{
    const char *names[] = {"alpha", "beta"};
    const char *tokens[] = {TOK_A, TOK_B};
    const char *fields[] = {"models=m1,m2 namespaces=2", "memory=1G sessions=10"};

    write_tenants(2, names, tokens, fields);
}

static int start(tc_cluster_t *cl, int n, const char *more)
{
    char extra[512];

    snprintf(extra, sizeof(extra), "--transport none --tenants-file %s %s", tenants_path,
             more ? more : "");
    return tc_start(cl, stratad_path, n, extra);
}

static srpc_channel_t *chan(const char *addr, const char *token, const char *client)
{
    srpc_channel_config_t cc = {.token = token, .client_id = client};
    srpc_channel_t *ch;

    assert_int_equal(srpc_channel_open(addr, &cc, &ch), ST_OK);
    return ch;
}

/* One call of method m over ch (10 s), which must answer; *resp: the answer. */
static void call_ok(srpc_channel_t *ch, int m, const void *req, void *resp)
{
    srpc_error_t err;

    assert_int_equal(srpc_call(ch, &srpc_cache_methods[m], (const ProtobufCMessage *)req, 10000,
                               (ProtobufCMessage **)resp, &err),
                     ST_OK);
}

/* Hello for (tenant, model); returns the status, fills ns and client id when OK. */
static st_status_t hello(srpc_channel_t *ch, const char *tenant, const char *model, uint64_t *ns,
                         uint64_t *client, srpc_error_t *err)
{
    Strata__V1__HelloRequest req = STRATA__V1__HELLO_REQUEST__INIT;
    Strata__V1__HelloResponse *resp = NULL;
    st_status_t st;

    req.protocol_version = 1;
    req.tenant = (char *)tenant;
    req.model = (char *)model;
    st = srpc_call(ch, &srpc_cache_methods[SRPC_CACHE_HELLO], &req.base, 10000,
                   (ProtobufCMessage **)&resp, err);
    if (st == ST_OK) {
        if (ns != NULL) {
            *ns = resp->namespace_id;
        }
        if (client != NULL) {
            *client = resp->client_id;
        }
        assert_int_equal(resp->namespace_seed.len, 16);
        protobuf_c_message_free_unpacked(&resp->base, NULL);
    }
    return st;
}

static int raw(srpc_channel_t *ch, int m, const void *req, size_t len, srpc_error_t *err)
{
    void *resp = NULL;
    size_t resp_len = 0;
    st_status_t st =
        srpc_call_raw(ch, srpc_cache_methods[m].path, req, len, 10000, &resp, &resp_len, err);

    free(resp);
    if (st == ST_OK) {
        err->grpc_code = 0;
        err->message[0] = '\0';
    }
    return err->grpc_code;
}

/* ------------------------------------------------------------------ tests -- */

static void test_unauthenticated_before_parse(void **state)
{
    tc_cluster_t cl;
    uint8_t garbage[4096];
    srpc_channel_t *none, *wrong, *a;
    srpc_error_t err;
    int health = -1;

    (void)state;
    memset(garbage, 0xff, sizeof(garbage)); /* does not parse as any message */
    write_ab();
    assert_int_equal(start(&cl, 1, NULL), 0);
    none = chan(cl.node[0].addr, NULL, NULL);
    wrong = chan(cl.node[0].addr, "not-a-tenant-token", NULL);
    a = chan(cl.node[0].addr, TOK_A, NULL);
    for (int m = SRPC_CACHE_LOOKUP; m < SRPC_CACHE_N_METHODS; m++) {
        int code = raw(none, m, garbage, sizeof(garbage), &err);

        if (code != GRPC_STATUS_UNAUTHENTICATED) {
            print_message("%s without a token: %d %s\n", srpc_cache_methods[m].path, code,
                          err.message);
        }
        assert_int_equal(code, GRPC_STATUS_UNAUTHENTICATED);
        assert_null(strstr(err.message, "parse"));
        code = raw(wrong, m, garbage, sizeof(garbage), &err);
        if (code != GRPC_STATUS_UNAUTHENTICATED) {
            print_message("%s with a wrong token: %d %s\n", srpc_cache_methods[m].path, code,
                          err.message);
        }
        assert_int_equal(code, GRPC_STATUS_UNAUTHENTICATED);
        /* An authenticated caller's garbage is parsed, and refused as such. */
        code = raw(a, m, garbage, sizeof(garbage), &err);
        if (code != GRPC_STATUS_INVALID_ARGUMENT) {
            print_message("%s with a tenant's token: %d %s\n", srpc_cache_methods[m].path, code,
                          err.message);
        }
        assert_int_equal(code, GRPC_STATUS_INVALID_ARGUMENT);
    }
    assert_int_equal(hello(wrong, "alpha", "m1", NULL, NULL, &err), ST_ERR_UNAUTHENTICATED);
    assert_int_equal(hello(none, "alpha", "m1", NULL, NULL, &err), ST_ERR_UNAUTHENTICATED);
    /* Health checks stay open. */
    assert_int_equal(srpc_health_check(none, "", 5000, &health, &err), ST_OK);
    assert_int_equal(health, SRPC_HEALTH_SERVING);
    srpc_channel_close(none);
    srpc_channel_close(wrong);
    srpc_channel_close(a);
    tc_stop_all(&cl);
}

/* The same holds with the one auth_token, no tenants file. */
static void test_unauthenticated_with_auth_token(void **state)
{
    tc_cluster_t cl;
    uint8_t garbage[1024];
    srpc_channel_t *none;
    srpc_error_t err;

    (void)state;
    memset(garbage, 0xff, sizeof(garbage));
    assert_int_equal(tc_start(&cl, stratad_path, 1, "--transport none --auth-token s3cret-t0ken"),
                     0);
    none = chan(cl.node[0].addr, NULL, NULL);
    assert_int_equal(raw(none, SRPC_CACHE_LOOKUP, garbage, sizeof(garbage), &err),
                     GRPC_STATUS_UNAUTHENTICATED);
    srpc_channel_close(none);
    tc_stop_all(&cl);
}

static void test_hello_authorization(void **state)
{
    tc_cluster_t cl;
    srpc_channel_t *a, *b;
    srpc_error_t err;
    uint64_t ns1 = 0, ns2 = 0;

    (void)state;
    write_ab();
    assert_int_equal(start(&cl, 1, NULL), 0);
    a = chan(cl.node[0].addr, TOK_A, NULL);
    b = chan(cl.node[0].addr, TOK_B, NULL);
    /* A's token opens no namespace of B: no seed of B for A. */
    assert_int_equal(hello(a, "beta", "m1", NULL, NULL, &err), ST_ERR_PERMISSION);
    assert_int_equal(err.grpc_code, GRPC_STATUS_PERMISSION_DENIED);
    assert_int_equal(hello(b, "alpha", "m1", NULL, NULL, &err), ST_ERR_PERMISSION);
    /* A model not in the tenant's list. */
    assert_int_equal(hello(a, "alpha", "m3", NULL, NULL, &err), ST_ERR_PERMISSION);
    assert_non_null(strstr(err.message, "m3"));
    /* No tenant in the Hello: the token's. */
    assert_int_equal(hello(a, "alpha", "m1", &ns1, NULL, &err), ST_OK);
    assert_int_equal(hello(a, "", "m1", &ns2, NULL, &err), ST_OK);
    assert_true(ns1 == ns2);
    assert_int_equal(hello(b, "beta", "any-model", NULL, NULL, &err), ST_OK);
    srpc_channel_close(a);
    srpc_channel_close(b);
    tc_stop_all(&cl);
}

static void test_cross_tenant_calls_answer_as_unknown(void **state)
{
    tc_cluster_t cl;
    srpc_channel_t *a, *b;
    srpc_error_t err, err2;
    uint64_t ns_a = 0, ns_b = 0, bogus;
    uint8_t req[16];
    size_t n;

    (void)state;
    write_ab();
    assert_int_equal(start(&cl, 1, NULL), 0);
    a = chan(cl.node[0].addr, TOK_A, NULL);
    b = chan(cl.node[0].addr, TOK_B, NULL);
    assert_int_equal(hello(a, "alpha", "m1", &ns_a, NULL, &err), ST_OK);
    assert_int_equal(hello(b, "beta", "m1", &ns_b, NULL, &err), ST_OK);
    bogus = ns_b ^ 0x5a5a5a5a5a5aull;
    for (int m = SRPC_CACHE_LOOKUP; m < SRPC_CACHE_N_METHODS; m++) {
        if (m == SRPC_CACHE_STATS) {
            continue;
        }
        n = np_ns_only(ns_b, req);
        raw(a, m, req, n, &err);
        n = np_ns_only(bogus, req);
        raw(a, m, req, n, &err2);
        print_message("%s: B's namespace with A's token: %d %s\n", srpc_cache_methods[m].path,
                      err.grpc_code, err.message);
        assert_int_not_equal(err.grpc_code, GRPC_STATUS_OK);
        /* Exactly as an unknown id: same code, same message but for the number. */
        assert_int_equal(err.grpc_code, err2.grpc_code);
        np_shape(err.message, ns_b);
        np_shape(err2.message, bogus);
        assert_string_equal(err.message, err2.message);
    }
    /* Stats: B's namespace as unknown; the node as a whole refused to a tenant. */
    n = np_ns_only(ns_b, req);
    assert_int_equal(raw(a, SRPC_CACHE_STATS, req, n, &err), GRPC_STATUS_NOT_FOUND);
    assert_int_equal(raw(a, SRPC_CACHE_STATS, "", 0, &err), GRPC_STATUS_PERMISSION_DENIED);
    /* Each tenant on its own namespace is served. */
    assert_int_equal(raw(b, SRPC_CACHE_STATS, req, n, &err), GRPC_STATUS_OK);
    n = np_ns_only(ns_a, req);
    assert_int_equal(raw(a, SRPC_CACHE_STATS, req, n, &err), GRPC_STATUS_OK);
    {
        /* A tenant's Stats hold its namespace's counters, not the node's calls of everyone. */
        Strata__V1__StatsRequest sq = STRATA__V1__STATS_REQUEST__INIT;
        Strata__V1__StatsResponse *sa = NULL;

        sq.namespace_id = ns_a;
        call_ok(a, SRPC_CACHE_STATS, &sq, &sa);
        assert_true(sa->n_counters > 0);
        assert_int_equal(sa->n_methods, 0);
        protobuf_c_message_free_unpacked(&sa->base, NULL);
    }
    srpc_channel_close(a);
    srpc_channel_close(b);
    tc_stop_all(&cl);
}

/* Reserves one VIS key in ns over ch; returns the reservation id. */
static uint64_t reserve_one(srpc_channel_t *ch, uint64_t ns, uint8_t tag)
{
    Strata__V1__ReserveRequest req = STRATA__V1__RESERVE_REQUEST__INIT;
    Strata__V1__ReserveResponse *resp = NULL;
    Strata__V1__ObjectKey key = STRATA__V1__OBJECT_KEY__INIT, *keys[1] = {&key};
    uint64_t len = 4096, id;
    uint8_t hash[16];

    memset(hash, tag, sizeof(hash));
    key.block_hash.data = hash;
    key.block_hash.len = 16;
    key.kind = STRATA__V1__OBJECT_KIND__VIS;
    req.namespace_id = ns;
    req.keys = keys;
    req.n_keys = 1;
    req.lengths = &len;
    req.n_lengths = 1;
    call_ok(ch, SRPC_CACHE_RESERVE, &req, &resp);
    id = resp->reservation_id;
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    return id;
}

static int abort_or_commit(srpc_channel_t *ch, int m, uint64_t ns, uint64_t id, srpc_error_t *err)
{
    uint8_t buf[32];
    size_t n = np_ns_only(ns, buf);

    buf[n++] = 0x10; /* field 2, reservation_id */
    do {
        buf[n++] = (uint8_t)((id & 0x7f) | (id >= 0x80 ? 0x80 : 0));
        id >>= 7;
    } while (id != 0);
    return raw(ch, m, buf, n, err);
}

/*
 * Beta on one daemon: a channel without a client id (b), two Hellos on it,
 * and a channel bound to each of them (b1, b2; hex1, hex2: their client ids).
 */
typedef struct beta_hellos {
    srpc_channel_t *b, *b1, *b2;
    uint64_t ns, c1, c2;
    char hex1[17], hex2[17];
} beta_hellos_t;

static void beta_hellos_open(tc_cluster_t *cl, beta_hellos_t *h)
{
    srpc_error_t err;

    write_ab();
    assert_int_equal(start(cl, 1, NULL), 0);
    h->b = chan(cl->node[0].addr, TOK_B, NULL);
    assert_int_equal(hello(h->b, "beta", "m1", &h->ns, &h->c1, &err), ST_OK);
    assert_int_equal(hello(h->b, "beta", "m1", NULL, &h->c2, &err), ST_OK);
    snprintf(h->hex1, sizeof(h->hex1), "%016llx", (unsigned long long)h->c1);
    snprintf(h->hex2, sizeof(h->hex2), "%016llx", (unsigned long long)h->c2);
    h->b1 = chan(cl->node[0].addr, TOK_B, h->hex1);
    h->b2 = chan(cl->node[0].addr, TOK_B, h->hex2);
}

static void beta_hellos_close(beta_hellos_t *h)
{
    srpc_channel_close(h->b);
    srpc_channel_close(h->b1);
    srpc_channel_close(h->b2);
}

static void test_batches_bound_to_their_hello(void **state)
{
    tc_cluster_t cl;
    beta_hellos_t h = {0};
    srpc_channel_t *b, *b1, *b2, *a;
    srpc_error_t err;
    uint64_t ns_b, r1, r2, r3;

    (void)state;
    beta_hellos_open(&cl, &h);
    assert_true(h.c1 != 0 && h.c2 != 0 && h.c1 != h.c2);
    b = h.b, b1 = h.b1, b2 = h.b2, ns_b = h.ns;
    a = chan(cl.node[0].addr, TOK_A, h.hex1);

    r1 = reserve_one(b1, ns_b, 1);
    r2 = reserve_one(b1, ns_b, 2);
    /* Random ids: not a counter another client could count along. */
    assert_true(r1 != 0 && r2 != 0 && (r2 > r1 ? r2 - r1 : r1 - r2) > 1000000);
    /* Another Hello of the same tenant, another tenant, a stock caller: as unknown. */
    assert_int_equal(abort_or_commit(b2, SRPC_CACHE_ABORT, ns_b, r1, &err), GRPC_STATUS_NOT_FOUND);
    assert_int_equal(abort_or_commit(b2, SRPC_CACHE_COMMIT, ns_b, r1, &err), GRPC_STATUS_NOT_FOUND);
    assert_int_equal(abort_or_commit(b, SRPC_CACHE_ABORT, ns_b, r1, &err), GRPC_STATUS_NOT_FOUND);
    assert_int_equal(abort_or_commit(a, SRPC_CACHE_ABORT, ns_b, r1, &err), GRPC_STATUS_NOT_FOUND);
    /* The owner's batch still works. */
    assert_int_equal(abort_or_commit(b1, SRPC_CACHE_ABORT, ns_b, r1, &err), GRPC_STATUS_OK);
    assert_int_equal(abort_or_commit(b1, SRPC_CACHE_ABORT, ns_b, r1, &err), GRPC_STATUS_OK);
    assert_int_equal(abort_or_commit(b1, SRPC_CACHE_ABORT, ns_b, r2, &err), GRPC_STATUS_OK);
    /* A stock client's batch binds to the tenant only. */
    r3 = reserve_one(b, ns_b, 3);
    assert_int_equal(abort_or_commit(b2, SRPC_CACHE_ABORT, ns_b, r3, &err), GRPC_STATUS_OK);
    srpc_channel_close(a);
    beta_hellos_close(&h);
    tc_stop_all(&cl);
}

/* Puts one VIS object inline, then Locates it with a lease over ch; returns the lease id. */
static uint64_t put_and_lease(srpc_channel_t *ch, uint64_t ns)
{
    Strata__V1__PutRequest pq = STRATA__V1__PUT_REQUEST__INIT;
    Strata__V1__InlineObject o = STRATA__V1__INLINE_OBJECT__INIT, *op = &o;
    Strata__V1__LocateRequest lq = STRATA__V1__LOCATE_REQUEST__INIT;
    Strata__V1__LocateResponse *la = NULL;
    Strata__V1__ObjectKey key = STRATA__V1__OBJECT_KEY__INIT, *kp = &key;
    ProtobufCMessage *pa = NULL;
    uint8_t hash[16], data[256];
    uint64_t id;

    memset(hash, 0x42, sizeof(hash));
    memset(data, 7, sizeof(data));
    key.block_hash.data = hash;
    key.block_hash.len = 16;
    key.kind = STRATA__V1__OBJECT_KIND__VIS;
    o.key = &key;
    o.data.data = data;
    o.data.len = sizeof(data);
    o.checksum = XXH3_64bits(data, sizeof(data));
    pq.namespace_id = ns;
    pq.objects = &op;
    pq.n_objects = 1;
    call_ok(ch, SRPC_CACHE_PUT, &pq, &pa);
    protobuf_c_message_free_unpacked(pa, NULL);
    lq.namespace_id = ns;
    lq.keys = &kp;
    lq.n_keys = 1;
    lq.lease = 1;
    call_ok(ch, SRPC_CACHE_LOCATE, &lq, &la);
    id = la->lease_id;
    protobuf_c_message_free_unpacked(&la->base, NULL);
    assert_true(id != 0);
    return id;
}

/* Releases lease id over ch; returns its key status. */
static int release_one(srpc_channel_t *ch, uint64_t ns, uint64_t id)
{
    Strata__V1__ReleaseRequest rq = STRATA__V1__RELEASE_REQUEST__INIT;
    Strata__V1__ReleaseResponse *ra = NULL;
    int status;

    rq.namespace_id = ns;
    rq.lease_ids = &id;
    rq.n_lease_ids = 1;
    call_ok(ch, SRPC_CACHE_RELEASE, &rq, &ra);
    assert_int_equal(ra->n_status, 1);
    status = ra->status[0];
    protobuf_c_message_free_unpacked(&ra->base, NULL);
    return status;
}

static void test_leases_bound_to_their_hello(void **state)
{
    tc_cluster_t cl;
    beta_hellos_t h = {0};
    srpc_channel_t *b, *b1, *b2;
    uint64_t ns_b, l1, l0;

    (void)state;
    beta_hellos_open(&cl, &h);
    b = h.b, b1 = h.b1, b2 = h.b2, ns_b = h.ns;
    l1 = put_and_lease(b1, ns_b);
    /* Another Hello of the tenant, or a caller without a client id: as unknown. */
    assert_int_equal(release_one(b2, ns_b, l1), STRATA__V1__KEY_STATUS__KEY_NOT_FOUND);
    assert_int_equal(release_one(b, ns_b, l1), STRATA__V1__KEY_STATUS__KEY_NOT_FOUND);
    assert_int_equal(release_one(b1, ns_b, l1), STRATA__V1__KEY_STATUS__KEY_OK);
    /* A stock client's lease is bound to the tenant only. */
    l0 = put_and_lease(b, ns_b);
    assert_int_equal(release_one(b2, ns_b, l0), STRATA__V1__KEY_STATUS__KEY_OK);
    beta_hellos_close(&h);
    tc_stop_all(&cl);
}

static void test_namespaces_quota(void **state)
{
    tc_cluster_t cl;
    srpc_channel_t *a;
    srpc_error_t err;

    (void)state;
    write_ab(); /* alpha: models=m1,m2 namespaces=2 */
    {
        const char *names[] = {"alpha", "beta"};
        const char *tokens[] = {TOK_A, TOK_B};
        const char *fields[] = {"models=m1,m2,m3 namespaces=2", ""};

        write_tenants(2, names, tokens, fields);
    }
    assert_int_equal(start(&cl, 1, NULL), 0);
    a = chan(cl.node[0].addr, TOK_A, NULL);
    assert_int_equal(hello(a, "alpha", "m1", NULL, NULL, &err), ST_OK);
    assert_int_equal(hello(a, "alpha", "m2", NULL, NULL, &err), ST_OK);
    assert_int_equal(hello(a, "alpha", "m3", NULL, NULL, &err), ST_ERR_EXHAUSTED);
    assert_int_equal(err.grpc_code, GRPC_STATUS_RESOURCE_EXHAUSTED);
    assert_non_null(strstr(err.message, "namespaces quota"));
    assert_non_null(strstr(err.message, "namespaces quota 2, in use 2, asked 1"));
    /* The ones it has stay open. */
    assert_int_equal(hello(a, "alpha", "m1", NULL, NULL, &err), ST_OK);
    srpc_channel_close(a);
    tc_stop_all(&cl);
}

/* A restart with the SSD tier: a tenant dropped from the file gets nothing
 * back, and a new tenant is not locked out by recovered namespaces. */
static void test_restart_does_not_lock_out(void **state)
{
    tc_cluster_t cl;
    srpc_channel_t *ch;
    srpc_error_t err;
    char dir[] = "/tmp/strata-tenancy-XXXXXX", more[128], cmd[256];
    const char *names[] = {"gamma"};
    const char *tokens[] = {TOK_C};
    const char *fields[] = {"namespaces=64"};

    (void)state;
    assert_non_null(mkdtemp(dir));
    snprintf(more, sizeof(more), "--data-dir %s --ssd-sync none --ssd-map-size 64M", dir);
    write_tenants(1, names, tokens, fields);
    assert_int_equal(start(&cl, 1, more), 0);
    ch = chan(cl.node[0].addr, TOK_C, NULL);
    for (int i = 0; i < 20; i++) {
        char model[16];

        snprintf(model, sizeof(model), "g%d", i);
        assert_int_equal(hello(ch, "gamma", model, NULL, NULL, &err), ST_OK);
    }
    srpc_channel_close(ch);
    assert_int_equal(tc_stop(&cl, 0, 20000), 0);
    /* gamma leaves, beta comes. */
    {
        const char *n2[] = {"beta"};
        const char *t2[] = {TOK_B};
        const char *f2[] = {"namespaces=2"};

        write_tenants(1, n2, t2, f2);
    }
    assert_int_equal(tc_restart(&cl, 0), 0);
    ch = chan(cl.node[0].addr, TOK_C, NULL);
    assert_int_equal(hello(ch, "gamma", "g0", NULL, NULL, &err), ST_ERR_UNAUTHENTICATED);
    srpc_channel_close(ch);
    ch = chan(cl.node[0].addr, TOK_B, NULL);
    assert_int_equal(hello(ch, "beta", "b0", NULL, NULL, &err), ST_OK);
    assert_int_equal(hello(ch, "beta", "b1", NULL, NULL, &err), ST_OK);
    srpc_channel_close(ch);
    tc_stop_all(&cl);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

typedef struct caller {
    const char *addr;
    uint64_t ns;
    volatile int stop;
    unsigned ok, failed;
} caller_t;

static void *caller_main(void *arg)
{
    caller_t *c = arg;
    srpc_channel_t *ch = chan(c->addr, TOK_A, NULL);
    uint8_t req[16];
    size_t n = np_ns_only(c->ns, req);
    srpc_error_t err;

    while (!c->stop) {
        if (raw(ch, SRPC_CACHE_STATS, req, n, &err) == GRPC_STATUS_OK) {
            c->ok++;
        } else {
            c->failed++;
        }
    }
    srpc_channel_close(ch);
    return NULL;
}

static void test_sighup_reload(void **state)
{
    tc_cluster_t cl;
    srpc_channel_t *a, *b, *c;
    srpc_error_t err;
    caller_t cal = {0};
    pthread_t th;
    int ok = 0;

    (void)state;
    write_ab();
    assert_int_equal(start(&cl, 1, NULL), 0);
    a = chan(cl.node[0].addr, TOK_A, NULL);
    b = chan(cl.node[0].addr, TOK_B, NULL);
    c = chan(cl.node[0].addr, TOK_C, NULL);
    cal.addr = cl.node[0].addr;
    assert_int_equal(hello(a, "alpha", "m1", &cal.ns, NULL, &err), ST_OK);
    assert_int_equal(hello(b, "beta", "m1", NULL, NULL, &err), ST_OK);
    assert_int_equal(hello(c, "gamma", "m1", NULL, NULL, &err), ST_ERR_UNAUTHENTICATED);
    assert_int_equal(pthread_create(&th, NULL, caller_main, &cal), 0);

    /* beta leaves, gamma comes. */
    {
        const char *names[] = {"alpha", "gamma"};
        const char *tokens[] = {TOK_A, TOK_C};
        const char *fields[] = {"models=m1,m2 namespaces=2", "models=m1"};

        write_tenants(2, names, tokens, fields);
    }
    assert_int_equal(kill(cl.node[0].pid, SIGHUP), 0);
    for (int i = 0; i < 100 && !ok; i++) {
        ok = hello(c, "gamma", "m1", NULL, NULL, &err) == ST_OK;
        if (!ok) {
            usleep(50000);
        }
    }
    assert_true(ok);
    assert_int_equal(hello(b, "beta", "m1", NULL, NULL, &err), ST_ERR_UNAUTHENTICATED);

    /* A bad file is not taken: the table stays. */
    {
        FILE *f = fopen(tenants_path, "w");

        assert_non_null(f);
        fprintf(f, "delta sha256:nothex\n");
        fclose(f);
    }
    assert_int_equal(kill(cl.node[0].pid, SIGHUP), 0);
    usleep(300000);
    assert_int_equal(hello(c, "gamma", "m1", NULL, NULL, &err), ST_OK);

    cal.stop = 1;
    pthread_join(th, NULL);
    print_message("calls during the reloads: ok=%u failed=%u\n", cal.ok, cal.failed);
    assert_true(cal.ok > 0);
    assert_int_equal(cal.failed, 0);
    srpc_channel_close(a);
    srpc_channel_close(b);
    srpc_channel_close(c);
    tc_stop_all(&cl);
}

static void test_peer_credential(void **state)
{
    tc_cluster_t cl;
    srpc_channel_t *a, *peer;
    srpc_error_t err;
    unsigned char mac[32];
    unsigned int n = 0;
    char cred[65];
    uint8_t req[64];
    size_t len;
    uint64_t ns_a = 0;
    Strata__V1__ClusterLookupRequest cr = STRATA__V1__CLUSTER_LOOKUP_REQUEST__INIT;
    Strata__V1__ClusterLookupResponse *resp = NULL;
    uint8_t hashes[4 * 16];

    (void)state;
    write_ab();
    assert_int_equal(start(&cl, 2, NULL), 0);
    assert_non_null(HMAC(EVP_sha256(), SECRET, (int)strlen(SECRET),
                         (const unsigned char *)"strata-peer-v1", 14, mac, &n));
    for (int i = 0; i < 32; i++) {
        sprintf(cred + 2 * i, "%02x", mac[i]);
    }
    a = chan(cl.node[0].addr, TOK_A, NULL);
    assert_int_equal(hello(a, "alpha", "m1", &ns_a, NULL, &err), ST_OK);
    a = (srpc_channel_close(a), chan(cl.node[1].addr, TOK_A, NULL));
    assert_int_equal(hello(a, "alpha", "m1", NULL, NULL, &err), ST_OK);
    srpc_channel_close(a);

    /* The fan-out reaches the other node with the cluster credential. */
    a = chan(cl.node[0].addr, TOK_A, NULL);
    memset(hashes, 7, sizeof(hashes));
    cr.namespace_id = ns_a;
    cr.block_hashes.data = hashes;
    cr.block_hashes.len = sizeof(hashes);
    call_ok(a, SRPC_CACHE_CLUSTER_LOOKUP, &cr, &resp);
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    srpc_channel_close(a);

    /* The credential does Lookup on any namespace, and nothing else. */
    peer = chan(cl.node[1].addr, cred, NULL);
    assert_int_equal(hello(peer, "alpha", "m1", NULL, NULL, &err), ST_ERR_PERMISSION);
    len = np_ns_only(ns_a, req);
    {
        /* Past authentication and the namespace check: an empty Lookup is the handler's to refuse. */
        int code = raw(peer, SRPC_CACHE_LOOKUP, req, len, &err);

        assert_true(code == GRPC_STATUS_OK || code == GRPC_STATUS_INVALID_ARGUMENT);
    }
    assert_int_equal(raw(peer, SRPC_CACHE_GET, req, len, &err), GRPC_STATUS_PERMISSION_DENIED);
    assert_int_equal(raw(peer, SRPC_CACHE_STATS, req, len, &err), GRPC_STATUS_PERMISSION_DENIED);
    srpc_channel_close(peer);
    /* A client's token is not a peer's. */
    peer = chan(cl.node[1].addr, "integration-test-cluster-secret", NULL);
    assert_int_equal(raw(peer, SRPC_CACHE_LOOKUP, req, len, &err), GRPC_STATUS_UNAUTHENTICATED);
    srpc_channel_close(peer);
    tc_stop_all(&cl);
}

/* Runs stratad with args; returns its exit status, or -1 when it was still
 * running after 5 s (it served: killed then). log gets its stderr. */
static int run_stratad(const char *args, char *log, size_t cap)
{
    char path[] = "/tmp/strata-tenancy-log-XXXXXX";
    int fd = mkstemp(path), status = 0;
    pid_t pid;
    FILE *f;
    size_t n;

    assert_true(fd >= 0);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char cmd[1024];

        dup2(fd, 2);
        dup2(fd, 1);
        snprintf(cmd, sizeof(cmd), "exec %s %s", stratad_path, args);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 100; i++) {
        if (waitpid(pid, &status, WNOHANG) == pid) {
            close(fd);
            f = fopen(path, "r");
            n = f ? fread(log, 1, cap - 1, f) : 0;
            log[n] = '\0';
            if (f) {
                fclose(f);
            }
            unlink(path);
            return WIFEXITED(status) ? WEXITSTATUS(status) : -2;
        }
        usleep(50000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    close(fd);
    unlink(path);
    log[0] = '\0';
    return -1;
}

static void test_insecure_listen_refused(void **state)
{
    char args[512], log[8192];
    int port = tc_free_port();

    (void)state;
    write_ab();
    /* No cluster secret. */
    snprintf(args, sizeof(args), "--listen 0.0.0.0:%d --transport none --tenants-file %s", port,
             tenants_path);
    assert_int_equal(run_stratad(args, log, sizeof(log)), 1);
    assert_non_null(strstr(log, "cluster_secret"));
    /* A secret but no authentication. */
    snprintf(args, sizeof(args),
             "--listen 0.0.0.0:%d --transport none --cluster-secret 0123456789abcdef0123", port);
    assert_int_equal(run_stratad(args, log, sizeof(log)), 1);
    assert_non_null(strstr(log, "authentication"));
    /* Both, the secret from the environment: it serves (killed after 5 s). */
    snprintf(args, sizeof(args), "--listen 0.0.0.0:%d --transport none --tenants-file %s", port,
             tenants_path);
    setenv("STRATA_CLUSTER_SECRET", "0123456789abcdef0123", 1);
    assert_int_equal(run_stratad(args, log, sizeof(log)), -1);
    unsetenv("STRATA_CLUSTER_SECRET");
    /* Authentication without a cluster secret, even on loopback: the seeds and the peer
     * credential would derive from the public development secret. */
    snprintf(args, sizeof(args), "--listen 127.0.0.1:%d --transport none --tenants-file %s", port,
             tenants_path);
    assert_int_equal(run_stratad(args, log, sizeof(log)), 1);
    assert_non_null(strstr(log, "cluster_secret"));
    snprintf(args, sizeof(args), "--listen 127.0.0.1:%d --transport none --auth-token abc", port);
    assert_int_equal(run_stratad(args, log, sizeof(log)), 1);
    /* A bad tenants file names its line. */
    {
        FILE *f = fopen(tenants_path, "w");
        char hash[80];

        assert_non_null(f);
        token_hash(TOK_A, hash);
        fprintf(f, "# two tenants, one token\nalpha %s\nbeta %s models=x\n", hash, hash);
        fclose(f);
    }
    snprintf(args, sizeof(args),
             "--listen 127.0.0.1:%d --transport none --tenants-file %s --cluster-secret "
             "0123456789abcdef0123",
             port, tenants_path);
    assert_int_equal(run_stratad(args, log, sizeof(log)), 1);
    assert_non_null(strstr(log, ":3:"));
    assert_non_null(strstr(log, "token hash of tenant alpha"));
    assert_null(strstr(log, TOK_A));
}

/* The group's set-up takes $STRATAD, where set, over the path given and names
 * the tenants file; its state is that name, which tm_group_unlink removes at
 * the end. */
static int group_setup(void **state)
{
    stratad_path = getenv("STRATAD") ? getenv("STRATAD") : stratad_path;
    snprintf(tenants_path, sizeof(tenants_path), "/tmp/strata-tenants-%d.txt", (int)getpid());
    *state = tenants_path;
    return 0;
}

TM_STRATAD_GROUP_MAIN(NULL, "<stratad>", &stratad_path, group_setup, tm_group_unlink,
                      cmocka_unit_test(test_unauthenticated_before_parse),
                      cmocka_unit_test(test_unauthenticated_with_auth_token),
                      cmocka_unit_test(test_hello_authorization),
                      cmocka_unit_test(test_cross_tenant_calls_answer_as_unknown),
                      cmocka_unit_test(test_batches_bound_to_their_hello),
                      cmocka_unit_test(test_leases_bound_to_their_hello),
                      cmocka_unit_test(test_namespaces_quota),
                      cmocka_unit_test(test_restart_does_not_lock_out),
                      cmocka_unit_test(test_sighup_reload), cmocka_unit_test(test_peer_credential),
                      cmocka_unit_test(test_insecure_listen_refused))
