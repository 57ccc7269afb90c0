/*
 * attack.c - the attack suite of issue 16 against a real stratad on loopback:
 * two tenants, acme (the attacker) and beta (the victim), each with its own
 * token, its data stored through libstrata; then each case tries one thing
 * that tenancy and integrity must forbid, through the route a stranger has:
 * raw gRPC calls with the attacker's own token (srpc), raw frames of calls
 * over the transport with the attacker's own key (tests/support/tcall_raw.c),
 * one-sided transport operations with the keys Hello handed out.
 *
 * Each case returns AT_PASS when the attack failed (was refused, or changed
 * nothing) and AT_FAIL with what it got when it worked. Cases whose fix has
 * not landed yet are in at_xfail[], with the part of issue 16 that fixes them:
 * their failure is printed as XFAIL and the run still passes; once one passes
 * (XPASS) the run fails until the case leaves at_xfail[], so that the list
 * stays true as the parts are merged. A case that cannot make its attack (its
 * set-up failed) is BROKEN, a failure either way. STRATA_ATTACK_CASE=<name>
 * runs one case.
 *
 * Quotas: acme's line of the tenants file carries AT_A_QUOTAS (memory, pins,
 * leases, namespaces); the last two cases hold acme at them and check that
 * beta is not starved and that a namespace past the quota is refused.
 * Transport (argv[2]): "ucx" (the default) or "libfabric:<provider>" ("+"
 * for ";", as CMake lists split on ';'). UCX checks no remote key, so its
 * daemon needs allow_shared_dataplane to take two tenants at all
 * (docs/security.md); libfabric's measured providers enforce keys
 * and start without it. Calls over the transport are UCX's: the tcall cases
 * are skipped over libfabric. at_xfail[] entries may hold for one transport.
 *
 * Credentials: when stratad's --help lists tenants_file, each tenant gets its
 * own token through a tenants file (name, sha256:<hex of the token>, models);
 * otherwise both share the daemon's one auth_token (the embedded default),
 * which is what makes most of these attacks work today.
 */
#include <glob.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "cluster.h"
#include "srpc.h"
#include "transport.h"
#include "strata.pb-c.h"
#include "strata/strata.h"
#include "tcall_raw.h"
#include "tenants.h"
#include "mkhash.h"
#include "grpc_conn.h"

#include "attack.h"

/* The run: the daemon, both tenants, the transport; one for the whole suite. */
at_state_t A;

int at_verdict(int verdict, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(A.why, sizeof(A.why), fmt, ap);
    va_end(ap);
    return verdict;
}

void at_die(const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "test_attack: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    tc_stop_all(&A.cl);
    exit(1);
}

/* ------------------------------------------------------------- set-up -- */

static void at_start(const char *stratad)
{
    static const char *const names[2] = {"acme", "beta"};
    static const char *const tokens[2] = {AT_TOKEN_A, AT_TOKEN_B};
    static const char *const fields[2] = {AT_A_QUOTAS, NULL};
    char args[512];

    if (tt_prepare_fields(&A.tenants, stratad, names, tokens, fields, 2, AT_MODELS) != 0) {
        at_die("cannot prepare the tenants");
    }
    A.metrics_port = tc_free_port();
    A.a.token = A.tenants.t[0].token;
    A.b.token = A.tenants.t[1].token; /* acme's, when the daemon has one token */
    if (A.provider != NULL) {
        /* Enforced keys: two tenants start without the opt-in. */
        snprintf(args, sizeof(args),
                 "--log-level warn --max-lease 10s --memory-limit 64M --chunk-bytes 2M "
                 "--max-object 1M --metrics-listen 127.0.0.1:%d --transport libfabric "
                 "--fabric-provider %s %s",
                 A.metrics_port, A.provider, A.tenants.flags);
    } else {
        snprintf(args, sizeof(args),
                 "--log-level warn --max-lease 10s --memory-limit 64M --chunk-bytes 2M "
                 "--max-object 1M --metrics-listen 127.0.0.1:%d --transport ucx %s %s",
                 A.metrics_port, A.tenants.flags, A.tenants.shared);
    }
    if (tc_start(&A.cl, stratad, 1, args) != 0) {
        at_die("cannot start stratad");
    }
}

/* The tenant's chain and KV layer 0 of each block, through libstrata. */
static void at_tenant_open(at_tenant_t *t, uint64_t stream)
{
    st_client_params_t p = {0};
    srpc_channel_config_t cc = {.token = t->token};
    uint32_t tok[AT_BLOCKS * 256];
    size_t bt, nb = 0;
    st_put_op_t ops[AT_BLOCKS];
    st_handle_t *h = NULL;

    p.field_mask = ST_CLIENT_FIELD_NODES | ST_CLIENT_FIELD_TENANT | ST_CLIENT_FIELD_MODEL |
                   ST_CLIENT_FIELD_TOKEN | ST_CLIENT_FIELD_TIMEOUT | ST_CLIENT_FIELD_TRANSPORT;
    p.nodes = A.cl.node[0].addr;
    p.tenant = t->name;
    p.model = AT_MODEL;
    p.token = t->token;
    p.timeout_ms = AT_TIMEOUT;
    p.transport = A.spec;
    if (st_client_connect(&p, &t->lib) != ST_OK) {
        at_die("libstrata cannot connect as %s", t->name);
    }
    bt = st_client_block_tokens(t->lib);
    if (bt * AT_BLOCKS > sizeof(tok) / sizeof(tok[0])) {
        at_die("blocks of %zu tokens are more than the test holds", bt);
    }
    for (size_t i = 0; i < bt * AT_BLOCKS; i++) {
        tok[i] = (uint32_t)(XXH3_64bits_withSeed(&i, sizeof(i), stream) % 150000);
    }
    /* The same tokens for both tenants: only the seed tells their hashes apart. */
    if (st_client_hash(t->lib, tok, bt * AT_BLOCKS, NULL, 0, t->chain, AT_BLOCKS, &nb) != ST_OK ||
        nb != AT_BLOCKS) {
        at_die("st_client_hash failed");
    }
    for (size_t b = 0; b < AT_BLOCKS; b++) {
        for (size_t i = 0; i < AT_OBJ; i++) {
            /* Per tenant: acme's bytes are never beta's (cross_tenant_get tells them apart). */
            t->data[b][i] = (uint8_t)(XXH3_64bits_withSeed(&i, sizeof(i), stream + b) >> 7) ^
                            (uint8_t)t->name[0];
        }
        ops[b] = (st_put_op_t){b, ST_KIND_KV, 0, t->data[b], AT_OBJ, 0, 0};
    }
    if (st_client_put(t->lib, t->chain, AT_BLOCKS, ops, AT_BLOCKS, 0, &h) != ST_OK ||
        st_handle_wait(h, 60000) != ST_OK) {
        at_die("%s cannot store its chain", t->name);
    }
    st_handle_release(h);
    for (size_t b = 0; b < AT_BLOCKS; b++) {
        if (ops[b].status != ST_OK) {
            at_die("%s: block %zu not stored: %s", t->name, b, st_strerror(ops[b].status));
        }
    }
    if (srpc_channel_open(A.cl.node[0].addr, &cc, &t->ch) != ST_OK ||
        tr_open_cfg(&t->tr, A.cl.node[0].addr, t->token, t->name, AT_MODEL, &A.tcfg) != ST_OK) {
        at_die("%s's raw clients cannot connect", t->name);
    }
}

static void at_tenant_close(at_tenant_t *t)
{
    tr_close(&t->tr);
    srpc_channel_close(t->ch);
    st_client_close(t->lib);
}

/* ------------------------------------------------------------ helpers -- */

/* A raw gRPC call on t's channel; returns the gRPC code, the answer in *resp. */
int at_call(at_tenant_t *t, int m, const void *req, ProtobufCMessage **resp, srpc_error_t *err)
{
    st_status_t st;

    *resp = NULL;
    memset(err, 0, sizeof(*err));
    st = srpc_call(t->ch, &srpc_cache_methods[m], req, AT_TIMEOUT, resp, err);
    return st == ST_OK ? 0 : (err->grpc_code ? err->grpc_code : 2);
}

void at_free(ProtobufCMessage *m)
{
    if (m != NULL) {
        protobuf_c_message_free_unpacked(m, NULL);
    }
}

Strata__V1__ObjectKey at_key(const at_tenant_t *t, size_t b)
{
    Strata__V1__ObjectKey k = STRATA__V1__OBJECT_KEY__INIT;

    k.block_hash.data = (uint8_t *)t->chain[b].b;
    k.block_hash.len = ST_HASH_BYTES;
    k.kind = STRATA__V1__OBJECT_KIND__KV;
    k.layer = 0;
    return k;
}

/* Whether the victim still reads its own block b byte for byte. */
static int at_victim_intact(size_t b)
{
    Strata__V1__GetRequest q = STRATA__V1__GET_REQUEST__INIT;
    Strata__V1__ObjectKey k = at_key(&A.b, b), *kp = &k;
    Strata__V1__GetResponse *r;
    srpc_error_t err;
    int code, ok;

    q.namespace_id = A.b.tr.ns;
    q.keys = &kp;
    q.n_keys = 1;
    code = at_call(&A.b, SRPC_CACHE_GET, &q, (ProtobufCMessage **)&r, &err);
    ok = code == 0 && r->n_objects == 1 && r->n_status == 1 &&
         r->status[0] == STRATA__V1__KEY_STATUS__KEY_OK && r->objects[0]->data.len == AT_OBJ &&
         memcmp(r->objects[0]->data.data, A.b.data[b], AT_OBJ) == 0;
    at_free(r ? &r->base : NULL);
    return ok;
}

/* -------------------------------------------------------------- cases -- */

/* With its own token, acme says Hello as beta: it must not get beta's seed. */
static int at_hello_as_other(void)
{
    Strata__V1__HelloRequest q = STRATA__V1__HELLO_REQUEST__INIT;
    Strata__V1__HelloResponse *r;
    srpc_error_t err;
    int code;

    q.protocol_version = 1;
    q.tenant = "beta";
    q.model = AT_MODEL;
    code = at_call(&A.a, SRPC_CACHE_HELLO, &q, (ProtobufCMessage **)&r, &err);
    if (code == 0) {
        int seed = r->namespace_seed.len == 16 &&
                   memcmp(r->namespace_seed.data, A.b.tr.hello->namespace_seed.data, 16) == 0;

        at_free(&r->base);
        return at_fail("Hello as beta with acme's token: OK%s", seed ? ", beta's seed" : "");
    }
    return AT_PASS;
}

/* No token at all: Hello is refused. */
static int at_hello_no_token(void)
{
    Strata__V1__HelloRequest q = STRATA__V1__HELLO_REQUEST__INIT;
    Strata__V1__HelloResponse *r = NULL;
    srpc_channel_t *ch = NULL;
    srpc_error_t err;
    st_status_t st;

    q.protocol_version = 1;
    q.tenant = "beta";
    q.model = AT_MODEL;
    if (srpc_channel_open(A.cl.node[0].addr, NULL, &ch) != ST_OK) {
        return at_broken("no channel");
    }
    st = srpc_call(ch, &srpc_cache_methods[SRPC_CACHE_HELLO], &q.base, AT_TIMEOUT,
                   (ProtobufCMessage **)&r, &err);
    at_free(r ? &r->base : NULL);
    srpc_channel_close(ch);
    return st == ST_OK ? at_fail("Hello without a token: OK") : AT_PASS;
}

/*
 * Every method of strata.v1.Cache without a token and with a wrong one, the
 * request naming acme's namespace (where it has one): refused as
 * unauthenticated or denied, whatever else is wrong with the request.
 */
static int at_every_method_bad_token(void)
{
    static const char *const tokens[] = {NULL, "not-a-token-of-this-cluster"};

    for (size_t t = 0; t < 2; t++) {
        srpc_channel_config_t cc = {.token = tokens[t]};
        srpc_channel_t *ch = NULL;

        if (srpc_channel_open(A.cl.node[0].addr, &cc, &ch) != ST_OK) {
            return at_broken("no channel");
        }
        for (int m = 0; m < SRPC_CACHE_N_METHODS; m++) {
            const srpc_method_t *md = &srpc_cache_methods[m];
            const ProtobufCFieldDescriptor *fd =
                protobuf_c_message_descriptor_get_field_by_name(md->req_desc, "namespace_id");
            ProtobufCMessage *req = calloc(1, md->req_desc->sizeof_message), *resp = NULL;
            srpc_error_t err;
            st_status_t st;

            if (req == NULL) {
                srpc_channel_close(ch);
                return at_broken("out of memory");
            }
            protobuf_c_message_init(md->req_desc, req);
            if (fd != NULL && fd->type == PROTOBUF_C_TYPE_UINT64) {
                *(uint64_t *)(void *)((char *)req + fd->offset) = A.a.tr.ns;
            }
            if (m == SRPC_CACHE_HELLO) {
                ((Strata__V1__HelloRequest *)(void *)req)->tenant = "acme";
                ((Strata__V1__HelloRequest *)(void *)req)->model = AT_MODEL;
            }
            memset(&err, 0, sizeof(err));
            st = srpc_call(ch, md, req, AT_TIMEOUT, &resp, &err);
            free(req);
            at_free(resp);
            if (st == ST_OK || (err.grpc_code != 7 && err.grpc_code != 16)) {
                srpc_channel_close(ch);
                return at_fail("%s %s: code %d (%s), not a refusal", md->path,
                               tokens[t] ? "with a wrong token" : "without a token",
                               st == ST_OK ? 0 : err.grpc_code, err.message);
            }
        }
        srpc_channel_close(ch);
    }
    return AT_PASS;
}

/* A body that does not parse from a caller without a token: refused as
 * unauthenticated before it is unpacked, not as a bad argument. */
static int at_unauth_garbage(void)
{
    srpc_channel_t *ch = NULL;
    size_t len = 2u << 20;
    uint8_t *junk = malloc(len);
    void *resp = NULL;
    size_t resp_len = 0;
    srpc_error_t err;
    st_status_t st;

    if (junk == NULL || srpc_channel_open(A.cl.node[0].addr, NULL, &ch) != ST_OK) {
        free(junk);
        return at_broken("set-up failed");
    }
    memset(junk, 0xff, len);
    memset(&err, 0, sizeof(err));
    st = srpc_call_raw(ch, "/strata.v1.Cache/Put", junk, len, AT_TIMEOUT, &resp, &resp_len, &err);
    free(resp);
    free(junk);
    srpc_channel_close(ch);
    if (st == ST_OK || err.grpc_code != 16) {
        return at_fail("2 MiB of garbage without a token: code %d (%s), not UNAUTHENTICATED",
                       st == ST_OK ? 0 : err.grpc_code, err.message);
    }
    return AT_PASS;
}

static int at_lookup_other_ns(void)
{
    Strata__V1__LookupRequest q = STRATA__V1__LOOKUP_REQUEST__INIT;
    Strata__V1__Segment sg = STRATA__V1__SEGMENT__INIT, *sgp = &sg;
    Strata__V1__LookupResponse *r;
    srpc_error_t err;
    int code;

    q.namespace_id = A.b.tr.ns;
    q.segments = &sgp;
    q.n_segments = 1;
    q.kinds_mask = 1u << STRATA__V1__OBJECT_KIND__KV;
    sg.block_hashes.data = (uint8_t *)A.b.chain[0].b;
    sg.block_hashes.len = AT_BLOCKS * ST_HASH_BYTES;
    code = at_call(&A.a, SRPC_CACHE_LOOKUP, &q, (ProtobufCMessage **)&r, &err);
    if (code == 0) {
        uint64_t m = r->n_segments ? r->segments[0]->matched_blocks : 0;

        at_free(&r->base);
        return at_fail("Lookup in beta's namespace with acme's token: OK, %llu blocks matched",
                       (unsigned long long)m);
    }
    return AT_PASS;
}

static int at_get_other_ns(void)
{
    Strata__V1__GetRequest q = STRATA__V1__GET_REQUEST__INIT;
    Strata__V1__ObjectKey k = at_key(&A.b, 0), *kp = &k;
    Strata__V1__GetResponse *r;
    srpc_error_t err;
    int code;

    q.namespace_id = A.b.tr.ns;
    q.keys = &kp;
    q.n_keys = 1;
    code = at_call(&A.a, SRPC_CACHE_GET, &q, (ProtobufCMessage **)&r, &err);
    if (code == 0) {
        int got = r->n_status == 1 && r->status[0] == STRATA__V1__KEY_STATUS__KEY_OK;

        at_free(&r->base);
        return at_fail("Get in beta's namespace with acme's token: OK%s",
                       got ? ", with beta's bytes" : "");
    }
    return AT_PASS;
}

/* acme writes its own bytes under beta's block: beta must still read its own. */
static int at_put_other_ns(void)
{
    Strata__V1__PutRequest q = STRATA__V1__PUT_REQUEST__INIT;
    Strata__V1__InlineObject o = STRATA__V1__INLINE_OBJECT__INIT, *op = &o;
    Strata__V1__ObjectKey k = at_key(&A.b, 1);
    Strata__V1__PutResponse *r;
    uint8_t poison[AT_OBJ];
    srpc_error_t err;
    int code;

    memset(poison, 0x66, sizeof(poison));
    o.key = &k;
    o.data.data = poison;
    o.data.len = sizeof(poison);
    o.checksum = XXH3_64bits(poison, sizeof(poison));
    q.namespace_id = A.b.tr.ns;
    q.objects = &op;
    q.n_objects = 1;
    code = at_call(&A.a, SRPC_CACHE_PUT, &q, (ProtobufCMessage **)&r, &err);
    at_free(r ? &r->base : NULL);
    if (code == 0) {
        return at_fail("Put in beta's namespace with acme's token: OK%s",
                       at_victim_intact(1) ? "" : ", beta reads acme's bytes");
    }
    return at_victim_intact(1) ? AT_PASS : at_fail("beta's block changed");
}

static int at_delete_other_ns(void)
{
    Strata__V1__DeleteRequest q = STRATA__V1__DELETE_REQUEST__INIT;
    Strata__V1__ObjectKey k = at_key(&A.b, 2), *kp = &k;
    Strata__V1__DeleteResponse *r;
    srpc_error_t err;
    int code;

    q.namespace_id = A.b.tr.ns;
    q.keys = &kp;
    q.n_keys = 1;
    code = at_call(&A.a, SRPC_CACHE_DELETE, &q, (ProtobufCMessage **)&r, &err);
    at_free(r ? &r->base : NULL);
    if (code == 0) {
        return at_fail("Delete in beta's namespace with acme's token: OK%s",
                       at_victim_intact(2) ? "" : ", beta's block is gone");
    }
    return AT_PASS;
}

static int at_pin_other_ns(void)
{
    Strata__V1__PinRequest q = STRATA__V1__PIN_REQUEST__INIT;
    Strata__V1__PinResponse *r;
    srpc_error_t err;
    int code;

    q.namespace_id = A.b.tr.ns;
    q.block_hashes.data = (uint8_t *)A.b.chain[0].b;
    q.block_hashes.len = ST_HASH_BYTES;
    q.ttl_ms = 0; /* until Unpin: pins with a TTL come with the quotas */
    code = at_call(&A.a, SRPC_CACHE_PIN, &q, (ProtobufCMessage **)&r, &err);
    at_free(r ? &r->base : NULL);
    if (code == 0) {
        Strata__V1__UnpinRequest u = STRATA__V1__UNPIN_REQUEST__INIT;

        u.namespace_id = q.namespace_id;
        u.block_hashes = q.block_hashes;
        (void)at_call(&A.a, SRPC_CACHE_UNPIN, &u, (ProtobufCMessage **)&r, &err);
        at_free(r ? &r->base : NULL);
        return at_fail("Pin in beta's namespace with acme's token: OK");
    }
    return AT_PASS;
}

static int at_stats_other_ns(void)
{
    Strata__V1__StatsRequest q = STRATA__V1__STATS_REQUEST__INIT;
    Strata__V1__StatsResponse *r;
    srpc_error_t err;
    int code;

    q.namespace_id = A.b.tr.ns;
    code = at_call(&A.a, SRPC_CACHE_STATS, &q, (ProtobufCMessage **)&r, &err);
    at_free(r ? &r->base : NULL);
    return code == 0 ? at_fail("Stats of beta's namespace with acme's token: OK") : AT_PASS;
}

/* beta's lease, from a Locate; 0 when none came. */
static uint64_t at_victim_lease(void)
{
    Strata__V1__LocateRequest q = STRATA__V1__LOCATE_REQUEST__INIT;
    Strata__V1__ObjectKey k = at_key(&A.b, 0), *kp = &k;
    Strata__V1__LocateResponse *r;
    srpc_error_t err;
    uint64_t id = 0;

    q.namespace_id = A.b.tr.ns;
    q.keys = &kp;
    q.n_keys = 1;
    q.lease = 1;
    if (at_call(&A.b, SRPC_CACHE_LOCATE, &q, (ProtobufCMessage **)&r, &err) == 0) {
        id = r->lease_id;
        at_free(&r->base);
    }
    return id;
}

/* acme releases beta's lease, in beta's namespace and in its own. */
static int at_release_other_lease(void)
{
    uint64_t id = at_victim_lease();
    uint64_t nss[2] = {A.b.tr.ns, A.a.tr.ns};

    if (id == 0) {
        return at_broken("beta got no lease");
    }
    for (int i = 0; i < 2; i++) {
        Strata__V1__ReleaseRequest q = STRATA__V1__RELEASE_REQUEST__INIT;
        Strata__V1__ReleaseResponse *r;
        srpc_error_t err;
        int code, ended;

        q.namespace_id = nss[i];
        q.lease_ids = &id;
        q.n_lease_ids = 1;
        code = at_call(&A.a, SRPC_CACHE_RELEASE, &q, (ProtobufCMessage **)&r, &err);
        ended = code == 0 && r->n_status == 1 && r->status[0] == STRATA__V1__KEY_STATUS__KEY_OK;
        at_free(r ? &r->base : NULL);
        if (ended) {
            return at_fail("acme released beta's lease %llu (namespace of %s)",
                           (unsigned long long)id, i == 0 ? "beta" : "acme");
        }
    }
    return AT_PASS;
}

/* Lease ids are random 64-bit values, not counters another client can guess. */
static int at_lease_ids_guessable(void)
{
    uint64_t x = at_victim_lease(), y = at_victim_lease();
    uint64_t d = x > y ? x - y : y - x;

    if (x == 0 || y == 0) {
        return at_broken("no leases");
    }
    return d < (1ull << 32) ? at_fail("two leases in a row: %llu and %llu", (unsigned long long)x,
                                      (unsigned long long)y)
                            : AT_PASS;
}

/* A transport call with acme's own key for beta's namespace. */
static int at_tcall_other_ns(void)
{
    Strata__V1__LookupRequest q = STRATA__V1__LOOKUP_REQUEST__INIT;
    Strata__V1__Segment sg = STRATA__V1__SEGMENT__INIT, *sgp = &sg;
    tr_client_t *c = &A.a.tr;
    tr_answer_t *ans;

    q.namespace_id = A.b.tr.ns;
    q.segments = &sgp;
    q.n_segments = 1;
    q.kinds_mask = 1u << STRATA__V1__OBJECT_KIND__KV;
    sg.block_hashes.data = (uint8_t *)A.b.chain[0].b;
    sg.block_hashes.len = AT_BLOCKS * ST_HASH_BYTES;
    tr_forget(c);
    if (tr_call_msg(c, TCALL_LOOKUP, 1, c->key, c->key_len, &q.base) != ST_OK ||
        tr_wait(c, 1, AT_TIMEOUT) != 1 || (ans = tr_find(c, 1)) == NULL) {
        return at_broken("no answer over the transport");
    }
    return ans->code == 0 ? at_fail("Lookup over the transport in beta's namespace with acme's "
                                    "key: OK")
                          : AT_PASS;
}

/* Locate and Release over the transport with acme's own key: beta's
 * objects in beta's namespace, and beta's lease. */
static int at_tcall_locate_release(void)
{
    Strata__V1__LocateRequest q = STRATA__V1__LOCATE_REQUEST__INIT;
    Strata__V1__ReleaseRequest rq = STRATA__V1__RELEASE_REQUEST__INIT;
    Strata__V1__ObjectKey k = at_key(&A.b, 4), *kp = &k;
    tr_client_t *c = &A.a.tr;
    uint64_t lease = at_victim_lease();
    tr_answer_t *x, *y;
    int released = 0;

    if (lease == 0) {
        return at_broken("beta got no lease");
    }
    q.namespace_id = A.b.tr.ns;
    q.keys = &kp;
    q.n_keys = 1;
    rq.namespace_id = A.b.tr.ns;
    rq.lease_ids = &lease;
    rq.n_lease_ids = 1;
    tr_forget(c);
    if (tr_call_msg(c, TCALL_LOCATE, 1, c->key, c->key_len, &q.base) != ST_OK ||
        tr_call_msg(c, TCALL_RELEASE, 2, c->key, c->key_len, &rq.base) != ST_OK ||
        tr_wait(c, 2, AT_TIMEOUT) != 2 || (x = tr_find(c, 1)) == NULL ||
        (y = tr_find(c, 2)) == NULL) {
        return at_broken("no answers over the transport");
    }
    if (y->code == 0) {
        Strata__V1__ReleaseResponse *rr =
            strata__v1__release_response__unpack(NULL, y->body_len, y->body);

        released =
            rr != NULL && rr->n_status == 1 && rr->status[0] == STRATA__V1__KEY_STATUS__KEY_OK;
        if (rr != NULL) {
            strata__v1__release_response__free_unpacked(rr, NULL);
        }
    }
    if (x->code == 0 || released) {
        return at_fail("over the transport with acme's key: Locate in beta's namespace %s, "
                       "Release of beta's lease %s",
                       x->code == 0 ? "OK" : "refused", released ? "ended it" : "refused");
    }
    return AT_PASS;
}

/* A transport call without a key, and with beta's key flipped. */
static int at_tcall_no_key(void)
{
    Strata__V1__LookupRequest q = STRATA__V1__LOOKUP_REQUEST__INIT;
    tr_client_t *c = &A.a.tr;
    uint8_t bad[TR_KEY_MAX];
    tr_answer_t *x, *y;

    q.namespace_id = A.b.tr.ns;
    memcpy(bad, A.b.tr.key, A.b.tr.key_len);
    bad[0] ^= 1;
    tr_forget(c);
    if (tr_call_msg(c, TCALL_LOOKUP, 1, NULL, 0, &q.base) != ST_OK ||
        tr_call_msg(c, TCALL_LOOKUP, 2, bad, A.b.tr.key_len, &q.base) != ST_OK ||
        tr_wait(c, 2, AT_TIMEOUT) != 2 || (x = tr_find(c, 1)) == NULL ||
        (y = tr_find(c, 2)) == NULL) {
        return at_broken("no answers over the transport");
    }
    return x->code == 0 || y->code == 0 ? at_fail("a keyless or wrong-key call was served")
                                        : AT_PASS;
}

/* ---------------------------------------------------------------- run -- */

typedef struct at_case {
    const char *name;
    int (*fn)(void);
    int ucx_only; /* calls over the transport, or UCX's own failure: skipped over libfabric */
} at_case_t;

static const at_case_t at_cases[] = {
    {"hello_no_token", at_hello_no_token, 0},
    {"hello_as_other_tenant", at_hello_as_other, 0},
    {"unauthenticated_garbage", at_unauth_garbage, 0},
    {"every_method_bad_token", at_every_method_bad_token, 0},
    {"lookup_other_namespace", at_lookup_other_ns, 0},
    {"get_other_namespace", at_get_other_ns, 0},
    {"put_other_namespace", at_put_other_ns, 0},
    {"delete_other_namespace", at_delete_other_ns, 0},
    {"pin_other_namespace", at_pin_other_ns, 0},
    {"stats_other_namespace", at_stats_other_ns, 0},
    {"release_other_lease", at_release_other_lease, 0},
    {"lease_ids_guessable", at_lease_ids_guessable, 0},
    {"tcall_no_key", at_tcall_no_key, 1},
    {"tcall_other_namespace", at_tcall_other_ns, 1},
    {"tcall_locate_release_other", at_tcall_locate_release, 1},
    {"cross_tenant_get", at_cross_tenant_get, 0},
    {"committed_write", at_committed_write, 0},
    {"tcp_client_vanishes", at_tcp_client_vanishes, 1},
    {"namespaces_beyond_quota", at_namespaces_quota, 0},
    {"quota_holds_spare_others", at_quota_holds, 0}, /* last: it fills acme's memory */
};

/* Cases known to fail (over one transport, or any: NULL), and why: until a
 * part of issue 16 lands (common.md's parts), or what the daemon does
 * about it. */
static const struct {
    const char *name, *transport, *why;
} at_xfail[] = {
    {"cross_tenant_get", "ucx",
     "UCX does not enforce keys: refused at start without the opt-in"}, /* allow_shared_dataplane */
    {"tcp_client_vanishes", "ucx",
     "open: a client over UCX tcp that asks for no peer failure detection can crash the "
     "daemon"}, /* UCX 1.13: the initiator picks the error mode */
};

static const char *at_xfail_why(const char *name)
{
    const char *tp = A.provider != NULL ? "libfabric" : "ucx";

    for (size_t i = 0; i < sizeof(at_xfail) / sizeof(at_xfail[0]); i++) {
        if (strcmp(at_xfail[i].name, name) == 0 &&
            (at_xfail[i].transport == NULL || strcmp(at_xfail[i].transport, tp) == 0)) {
            return at_xfail[i].why;
        }
    }
    return NULL;
}

int main(int argc, char **argv)
{
    const char *only = getenv("STRATA_ATTACK_CASE");
    int failed = 0, xfail = 0, xpass = 0, passed = 0, ran = 0, skipped = 0;

    if (argc < 2) {
        fprintf(stderr, "usage: %s <stratad> [ucx|libfabric:<provider>]\n", argv[0]);
        return 2;
    }
    snprintf(A.spec, sizeof(A.spec), "%s", argc > 2 ? argv[2] : "ucx");
    for (char *q = A.spec; *q != '\0'; q++) {
        *q = *q == '+' ? ';' : *q; /* "tcp+ofi_rxm": CMake lists split on ';' */
    }
    A.tcfg.backend = TP_UCX;
    if (strncmp(A.spec, "libfabric:", 10) == 0 && A.spec[10] != '\0') {
        A.provider = A.spec + 10;
        A.tcfg.backend = TP_FABRIC;
        A.tcfg.fabric_provider = A.provider;
    } else if (strcmp(A.spec, "ucx") != 0) {
        fprintf(stderr, "test_attack: transport %s: expected ucx or libfabric:<provider>\n",
                A.spec);
        return 2;
    }
    A.a.name = "acme";
    A.b.name = "beta";
    A.stratad = realpath(argv[1], NULL); /* a case starts a daemon from another directory */
    if (A.stratad == NULL) {
        at_die("no stratad at %s", argv[1]);
    }
    at_start(A.stratad);
    printf("test_attack: %s, transport %s\n",
           A.tenants.per_tenant ? "a token per tenant (tenants file)"
                                : "one auth_token for both tenants",
           A.spec);
    at_tenant_open(&A.a, 11);
    at_tenant_open(&A.b, 11);
    if (A.a.tr.ns == A.b.tr.ns) {
        at_die("both tenants got namespace %llu", (unsigned long long)A.a.tr.ns);
    }
    for (size_t i = 0; i < sizeof(at_cases) / sizeof(at_cases[0]); i++) {
        const at_case_t *c = &at_cases[i];
        const char *part = at_xfail_why(c->name);
        int res;

        if (only != NULL && only[0] != '\0' && strcmp(only, c->name) != 0) {
            continue;
        }
        ran++;
        A.why[0] = '\0';
        res = c->ucx_only && A.provider != NULL ? AT_SKIP : c->fn();
        if (res == AT_SKIP) {
            printf("  SKIP   %s: UCX only (calls over the transport, UCX's error modes)\n",
                   c->name);
            skipped++;
            continue;
        }
        if (part != NULL && strncmp(part, "open", 4) == 0 && res != AT_FAIL) {
            /* A known, unfixed weakness whose attack does not always land
             * (a race in UCX's teardown): reported, not judged either way. */
            printf("  OPEN   %s (%s): the attack %s this time%s%s\n", c->name, part,
                   res == AT_PASS ? "did not land" : "could not be set up", A.why[0] ? ": " : "",
                   A.why);
            xfail++;
        } else if (res == AT_BROKEN) {
            printf("  BROKEN %s: %s\n", c->name, A.why);
            failed++;
        } else if (res == AT_PASS && part == NULL) {
            printf("  PASS   %s\n", c->name);
            passed++;
        } else if (res == AT_PASS) {
            printf("  XPASS  %s: the attack fails now; remove it from at_xfail (%s)\n", c->name,
                   part);
            xpass++;
        } else if (part != NULL) {
            printf("  XFAIL  %s (%s): %s\n", c->name, part, A.why);
            xfail++;
        } else {
            printf("  FAIL   %s: %s\n", c->name, A.why);
            failed++;
        }
        fflush(stdout);
    }
    printf("test_attack: %d cases: %d passed, %d failed, %d expected failures, %d unexpected "
           "passes, %d skipped\n",
           ran, passed, failed, xfail, xpass, skipped);
    at_tenant_close(&A.a);
    at_tenant_close(&A.b);
    if (tc_stop(&A.cl, 0, 30000) != 0) {
        printf("test_attack: the daemon did not exit 0 on SIGTERM\n");
        failed++;
    }
    tc_stop_all(&A.cl);
    tt_cleanup(&A.tenants);
    free((void *)A.stratad);
    return failed || xpass ? 1 : 0;
}
