/*
 * attack_rma.c - the attack suite's one-sided cases (see attack.c): a tenant
 * reads or writes another's extents with the keys Hello handed out or keys
 * it forged, writes over committed objects, and a TCP client that vanishes.
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

static void at_rma_done(void *user, st_status_t status)
{
    *(st_status_t *)user = status;
}

/*
 * A one-sided get (put 0) or put (put 1) of len bytes between local (in mem)
 * and remote through rkey on c's endpoint, waiting at most AT_TIMEOUT for
 * it: a refused operation may never complete (libfabric shm). Returns its
 * status, ST_ERR_TIMEOUT when nothing came.
 */
static st_status_t at_rma(tr_client_t *c, int put, void *local, size_t len, tp_mem_t *mem,
                          uint64_t remote, tp_rkey_t *rkey)
{
    st_status_t done = ST_ERR_BUSY, st;

    st = put ? tp_put(c->ep, local, len, mem, remote, rkey, at_rma_done, &done)
             : tp_get(c->ep, local, len, mem, remote, rkey, at_rma_done, &done);
    if (st != ST_OK) {
        return st;
    }
    for (int i = 0; done == ST_ERR_BUSY && i < AT_TIMEOUT; i++) {
        tp_progress(c->tp);
        if (done == ST_ERR_BUSY) {
            usleep(1000);
        }
    }
    if (done == ST_ERR_BUSY) {
        return ST_ERR_TIMEOUT;
    }
    return done == ST_OK && put ? tp_ep_flush(c->ep, AT_TIMEOUT) : done;
}

/*
 * Where owner's block b is, from a Locate of owner's own: *remote_p the
 * address in owner's Hello, *region_p the region. Returns 0, or -1.
 */
static int at_locate(at_tenant_t *owner, size_t b, uint64_t *remote_p, uint32_t *region_p)
{
    Strata__V1__LocateRequest q = STRATA__V1__LOCATE_REQUEST__INIT;
    Strata__V1__ObjectKey k = at_key(owner, b), *kp = &k;
    Strata__V1__LocateResponse *r;
    Strata__V1__HelloResponse *h = owner->tr.hello;
    srpc_error_t err;
    int found = -1;

    q.namespace_id = owner->tr.ns;
    q.keys = &kp;
    q.n_keys = 1;
    if (at_call(owner, SRPC_CACHE_LOCATE, &q, (ProtobufCMessage **)&r, &err) != 0) {
        return -1;
    }
    for (size_t i = 0; i < h->n_regions && r->locations != NULL && r->locations->n_state == 1 &&
                       r->locations->state[0] == STRATA__V1__OBJECT_STATE__OBJECT_PRESENT;
         i++) {
        if (h->regions[i]->id == r->locations->region_id[0]) {
            *remote_p = h->regions[i]->remote_addr + r->locations->offset[0];
            *region_p = h->regions[i]->id;
            found = 0;
        }
    }
    at_free(&r->base);
    return found;
}

/* The key of region `region` in t's Hello, unpacked for t's endpoint (NULL: none). */
static tp_rkey_t *at_region_key(at_tenant_t *t, uint32_t region)
{
    Strata__V1__HelloResponse *h = t->tr.hello;
    tp_rkey_t *rkey = NULL;

    for (size_t i = 0; i < h->n_regions; i++) {
        if (h->regions[i]->id == region &&
            tp_rkey_unpack(t->tr.ep, h->regions[i]->rkey.data, h->regions[i]->rkey.len, &rkey) !=
                ST_OK) {
            rkey = NULL;
        }
    }
    return rkey;
}

/*
 * key (a packed remote key of strata's transport: transport.c's envelope,
 * 40 bytes of header then the backend's key) re-wrapped with the region
 * bounds base and len, unpacked for c's endpoint. The bounds are the
 * initiator's own claim, checked only by the initiator's library (an
 * unkeyed XXH3 guards the envelope against corruption, not against its
 * holder): a hostile client skips them, and so does this one, so that only
 * what the target enforces stands between acme's key and beta's memory.
 */
static tp_rkey_t *at_forged_key(tr_client_t *c, const ProtobufCBinaryData *key, uint64_t base,
                                uint64_t len)
{
    enum { HDR = 40 };
    tp_rkey_t *rkey = NULL;
    uint8_t *blob;
    XXH3_state_t x;
    uint64_t sum;

    if (key->len <= HDR || (blob = malloc(key->len)) == NULL) {
        return NULL;
    }
    memcpy(blob, key->data, key->len);
    for (int i = 0; i < 8; i++) {
        blob[16 + i] = (uint8_t)(base >> (8 * i));
        blob[24 + i] = (uint8_t)(len >> (8 * i));
    }
    XXH3_64bits_reset(&x);
    XXH3_64bits_update(&x, blob, HDR - 8);
    XXH3_64bits_update(&x, blob + HDR, key->len - HDR);
    sum = XXH3_64bits_digest(&x);
    for (int i = 0; i < 8; i++) {
        blob[HDR - 8 + i] = (uint8_t)(sum >> (8 * i));
    }
    if (tp_rkey_unpack(c->ep, blob, key->len, &rkey) != ST_OK) {
        rkey = NULL;
    }
    free(blob);
    return rkey;
}

/*
 * acme reads beta's committed block with a one-sided get through its own
 * region key at beta's address (from beta's Locate and Hello, as a
 * colluder or a guess would give it): refused, or no byte of beta's. First
 * beta itself reads the same address with its own key (the address is
 * right). Over UCX acme's client picks tcp (the initiator chooses; sm's
 * mapped segment ends where acme's region does, cma and tcp reach the whole
 * process): UCX checks no key, acme reads beta's block, and that is why a
 * UCX daemon refuses two tenants without allow_shared_dataplane.
 */
int at_cross_tenant_get(void)
{
    tp_config_t cfg = A.tcfg;
    tr_client_t x, *c = &A.a.tr;
    uint64_t remote = 0;
    uint32_t region = 0;
    tp_rkey_t *bkey = NULL, *akey = NULL;
    tp_mem_t *amem = NULL, *bmem = NULL;
    st_status_t own, st = ST_ERR_UNSUPPORTED;
    int res = AT_PASS, leaked = 0, own_client = 0;

    if (A.provider == NULL) {
        cfg.ucx_tls = "tcp,self";
        if (tr_open_cfg(&x, A.cl.node[0].addr, A.a.token, "acme", AT_MODEL, &cfg) != ST_OK) {
            return at_broken("acme cannot connect over tcp,self");
        }
        c = &x;
        own_client = 1;
    }
    if (c->hello->n_regions == 0 || at_locate(&A.b, 0, &remote, &region) != 0) {
        res = at_broken("no region of acme's, or beta's block not located");
        goto out;
    }
    bkey = at_region_key(&A.b, region);
    for (size_t i = 0; i < A.b.tr.hello->n_regions; i++) {
        const Strata__V1__Region *br = A.b.tr.hello->regions[i];

        if (br->id == region) {
            /* acme's own key, with beta's region as its bounds. */
            akey = at_forged_key(c, &c->hello->regions[0]->rkey, br->remote_addr, br->length);
        }
    }
    if (bkey == NULL || akey == NULL || tp_mem_alloc(A.b.tr.tp, AT_OBJ, &bmem) != ST_OK ||
        tp_mem_alloc(c->tp, AT_OBJ, &amem) != ST_OK) {
        res = at_broken("no keys or no local buffers");
        goto out;
    }
    memset(tp_mem_addr(bmem), 0, AT_OBJ);
    own = at_rma(&A.b.tr, 0, tp_mem_addr(bmem), AT_OBJ, bmem, remote, bkey);
    if (own != ST_OK || memcmp(tp_mem_addr(bmem), A.b.data[0], AT_OBJ) != 0) {
        res = at_broken("beta cannot read its own block at that address (%s)", st_strerror(own));
        goto out;
    }
    memset(tp_mem_addr(amem), 0, AT_OBJ);
    st = at_rma(c, 0, tp_mem_addr(amem), AT_OBJ, amem, remote, akey);
    for (size_t i = 0; st == ST_OK && i + 64 <= AT_OBJ && !leaked; i += 64) {
        leaked = memcmp((uint8_t *)tp_mem_addr(amem) + i, A.b.data[0] + i, 64) == 0;
    }
    if (leaked) {
        res = at_fail("a get with acme's region key at beta's address read beta's block");
    }
    printf("         cross_tenant_get: acme's key at beta's address: %s, %s\n", st_strerror(st),
           leaked ? "beta's bytes" : "none of beta's bytes");
out:
    tp_rkey_destroy(akey);
    tp_rkey_destroy(bkey);
    if (amem != NULL) {
        tp_mem_deregister(c->tp, amem);
    }
    if (bmem != NULL) {
        tp_mem_deregister(A.b.tr.tp, bmem);
    }
    if (own_client) {
        tr_close(&x);
    }
    return res;
}

/*
 * acme writes over its own committed object through the key Hello gave.
 * Where the node says committed_read_only (libfabric) the write must be
 * refused and the object read back unchanged, by inline Get and by
 * libstrata. Where it cannot (UCX) the write lands, and then the scribbled
 * object must never be served as a hit: inline Get checks the object
 * against its commit checksum (cd_store_get), libstrata checks every object
 * of such a node; either returns the committed bytes or a miss.
 */
int at_committed_write(void)
{
    Strata__V1__HelloResponse *h = A.a.tr.hello;
    Strata__V1__ObjectKey k = at_key(&A.a, 3), *kp = &k;
    tp_mem_t *mem = NULL;
    tp_rkey_t *rkey = NULL;
    srpc_error_t err;
    st_status_t st = ST_ERR_UNSUPPORTED, lib;
    uint64_t remote = 0;
    uint32_t region = 0;
    int served, intact, lib_intact;
    uint8_t *got = calloc(1, AT_OBJ);
    st_get_op_t g = {.block = 3, .kind = ST_KIND_KV, .dst = got, .dst_len = AT_OBJ};
    st_handle_t *hd = NULL;

    if (got == NULL || at_locate(&A.a, 3, &remote, &region) != 0 ||
        (rkey = at_region_key(&A.a, region)) == NULL ||
        tp_mem_alloc(A.a.tr.tp, AT_OBJ, &mem) != ST_OK) {
        free(got);
        tp_rkey_destroy(rkey);
        return at_broken("acme's block 3 not located, or no key or buffer");
    }
    memset(tp_mem_addr(mem), 0x77, AT_OBJ);
    st = at_rma(&A.a.tr, 1, tp_mem_addr(mem), 64, mem, remote, rkey);
    tp_rkey_destroy(rkey);
    tp_mem_deregister(A.a.tr.tp, mem);
    /* Inline Get over gRPC. */
    {
        Strata__V1__GetRequest q = STRATA__V1__GET_REQUEST__INIT;
        Strata__V1__GetResponse *gr;

        q.namespace_id = A.a.tr.ns;
        q.keys = &kp;
        q.n_keys = 1;
        served = at_call(&A.a, SRPC_CACHE_GET, &q, (ProtobufCMessage **)&gr, &err) == 0 &&
                 gr->n_status == 1 && gr->status[0] == STRATA__V1__KEY_STATUS__KEY_OK;
        intact = served && gr->objects[0]->data.len == AT_OBJ &&
                 memcmp(gr->objects[0]->data.data, A.a.data[3], AT_OBJ) == 0;
        at_free(gr ? &gr->base : NULL);
    }
    /* libstrata, over the transport. */
    lib = st_client_get(A.a.lib, A.a.chain, AT_BLOCKS, &g, 1, &hd);
    if (lib == ST_OK) {
        lib = st_handle_wait(hd, 60000);
        st_handle_release(hd);
    }
    lib = lib == ST_OK ? g.status : lib;
    lib_intact = lib == ST_OK && g.length == AT_OBJ && memcmp(got, A.a.data[3], AT_OBJ) == 0;
    free(got);
    printf("         committed_write: put %s (committed_read_only=%d); inline Get %s; "
           "libstrata %s%s\n",
           st_strerror(st), (int)h->committed_read_only,
           intact   ? "the committed bytes"
           : served ? "OTHER BYTES"
                    : "a miss",
           st_strerror(lib), lib == ST_OK && !lib_intact ? " with OTHER BYTES" : "");
    if (served && !intact) {
        return at_fail("inline Get served a scribbled committed object as a hit");
    }
    if (lib == ST_OK && !lib_intact) {
        return at_fail("libstrata returned a scribbled committed object as a hit");
    }
    if (h->committed_read_only && (st == ST_OK || !intact || !lib_intact)) {
        return at_fail("committed_read_only, yet the put was %s and the object %s", st_strerror(st),
                       intact && lib_intact ? "intact" : "not served");
    }
    if (!h->committed_read_only && lib != ST_OK && lib != ST_ERR_NOT_FOUND) {
        return at_broken("libstrata's get failed: %s", st_strerror(lib));
    }
    return AT_PASS;
}

/*
 * A client over UCX's TCP that asks for no peer failure detection sends a
 * call and closes before the answer: UCX 1.13 lets the initiator choose the
 * error mode of both ends, and the daemon crashed answering (strata's own
 * clients ask for detection wherever TCP carries their traffic;
 * docs/transport.md). Against a daemon of its own, on tcp,self.
 */
int at_tcp_client_vanishes(void)
{
    tc_cluster_t cl;
    tp_config_t cfg = {
        .backend = TP_UCX, .ucx_tls = "tcp,self", .ucx_peer_failure = TP_PEER_FAILURE_OFF};
    const char *old = getenv("UCX_TLS");
    char *saved = old != NULL ? strdup(old) : NULL;
    char args[256], cwd[512];
    int alive = 1, rc;
    pid_t pid;

    snprintf(args, sizeof(args), "--log-level warn %s %s", A.tenants.flags, A.tenants.shared);
    setenv("UCX_TLS", "tcp,self", 1);
    /* Started in /tmp: what a crash leaves in its directory stays out of the build. */
    if (getcwd(cwd, sizeof(cwd)) == NULL || chdir("/tmp") != 0) {
        cwd[0] = '\0';
    }
    rc = tc_start(&cl, A.stratad, 1, args);
    if (cwd[0] != '\0' && chdir(cwd) != 0) {
        at_die("cannot return to %s", cwd);
    }
    if (saved != NULL) {
        setenv("UCX_TLS", saved, 1);
        free(saved);
    } else {
        unsetenv("UCX_TLS");
    }
    if (rc != 0) {
        return at_broken("cannot start a daemon on tcp,self");
    }
    pid = cl.node[0].pid;
    for (int round = 0; round < 20 && alive; round++) {
        Strata__V1__LookupRequest q = STRATA__V1__LOOKUP_REQUEST__INIT;
        tr_client_t c;

        if (tr_open_cfg(&c, cl.node[0].addr, A.a.token, "acme", AT_MODEL, &cfg) != ST_OK) {
            tc_stop_all(&cl);
            return at_broken("cannot connect over tcp,self");
        }
        q.namespace_id = c.ns;
        for (uint64_t id = 1; id <= 8; id++) {
            (void)tr_call_msg(&c, TCALL_LOOKUP, id, c.key, c.key_len, &q.base);
        }
        (void)tp_progress(c.tp);
        tr_close(&c);
        usleep(200 * 1000);
        alive = waitpid(cl.node[0].pid, NULL, WNOHANG) == 0;
    }
    if (!alive) {
        char pat[64];
        glob_t g;

        cl.node[0].pid = 0;
        snprintf(pat, sizeof(pat), "/tmp/stratad*-%d,*.btr", (int)pid);
        if (glob(pat, 0, NULL, &g) == 0) {
            for (size_t i = 0; i < g.gl_pathc; i++) {
                unlink(g.gl_pathv[i]);
            }
            globfree(&g);
        }
    }
    tc_stop_all(&cl);
    return alive ? AT_PASS
                 : at_fail("the daemon died answering a client that had closed its endpoint");
}
