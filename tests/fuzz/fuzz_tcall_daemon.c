/*
 * fuzz_tcall_daemon.c - the daemon side of test_fuzz_tcall (see
 * fuzz_tcall.c): its liveness between batches, beta's valid calls, a client
 * that vanishes, frames sent and judged, calls with no reply, the chain
 * libstrata stores, replay of a saved frame, a stop under load.
 */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <ucp/api/ucp.h>

#include "cluster.h"
#include "fuzz_util.h"
#include "health.pb-c.h"
#include "srpc.h"
#include "strata.pb-c.h"
#include "strata/strata.h"
#include "tcall_raw.h"
#include "tenants.h"

#include "fuzz_tcall.h"

/* ---------------------------------------------------------- the daemon -- */

void ft_check_alive(void)
{
    srpc_error_t err;
    int status = 0;

    FT_CHECK(kill(T.cl.node[0].pid, 0) == 0, "the daemon is gone");
    FT_CHECK(srpc_health_check(T.a.ch, "", 10000, &status, &err) == ST_OK &&
                 status == SRPC_HEALTH_SERVING,
             "the daemon is not serving: %s", err.message);
}

/*
 * Tenant beta asks, over its own connection with its own key, for tenant
 * acme's chain in its own namespace: it finds none of it (namespaces are
 * per tenant), and its answers come to it, not to acme's client.
 */
void ft_beta_calls(void)
{
    uint64_t id0 = T.next_id + 1;
    int n = 4;

    tr_forget(&T.b);
    for (int i = 0; i < n; i++) {
        ProtobufCMessage *m;
        uint32_t method = i % 2 ? TCALL_LOCATE : TCALL_LOOKUP;

        if (method == TCALL_LOOKUP) {
            Strata__V1__LookupRequest *q = ft_lookup_req(FT_CHAIN);

            q->namespace_id = T.b.ns;
            m = &q->base;
        } else {
            Strata__V1__LocateRequest *q = ft_locate_req(0, 2 * FT_CHAIN, 0);

            q->namespace_id = T.b.ns;
            m = &q->base;
        }
        FT_CHECK(tr_call_msg(&T.b, method, ++T.next_id, T.b.key, T.b.key_len, m) == ST_OK,
                 "tenant beta cannot send");
    }
    FT_CHECK(tr_wait(&T.b, (size_t)n, FT_WAIT_MS) == (size_t)n && T.b.n_bad == 0,
             "tenant beta got %zu of %d answers", T.b.n_ans, n);
    for (int i = 0; i < n; i++) {
        tr_answer_t *a = tr_find(&T.b, id0 + (uint64_t)i);

        FT_CHECK(a != NULL && a->code == GC_OK, "tenant beta's call %d: %s", i,
                 a ? a->msg : "no answer");
        if (i % 2 == 0) {
            Strata__V1__LookupResponse *lr =
                strata__v1__lookup_response__unpack(NULL, a->body_len, a->body);

            FT_CHECK(lr != NULL && lr->n_segments == 1 && lr->segments[0]->matched_blocks == 0,
                     "tenant beta's Lookup found tenant acme's chain in its own namespace");
            strata__v1__lookup_response__free_unpacked(lr, NULL);
        } else {
            Strata__V1__LocateResponse *lr =
                strata__v1__locate_response__unpack(NULL, a->body_len, a->body);

            FT_CHECK(lr != NULL && lr->locations != NULL && lr->locations->n_state == 2 * FT_CHAIN,
                     "tenant beta's Locate answer does not unpack");
            for (size_t k = 0; k < lr->locations->n_state; k++) {
                FT_CHECK(lr->locations->state[k] != STRATA__V1__OBJECT_STATE__OBJECT_PRESENT,
                         "tenant beta's Locate found tenant acme's object %zu", k);
            }
            strata__v1__locate_response__free_unpacked(lr, NULL);
        }
    }
}

/* Another client sends a burst and vanishes before the answers come. */
void ft_vanish(void)
{
    tr_client_t b;
    ft_frame_t f;

    FT_CHECK(tr_open(&b, T.cl.node[0].addr, T.tenants.t[0].token, "acme", "fz") == ST_OK,
             "a second client cannot connect");
    for (int i = 0; i < 20; i++) {
        ft_build(&f, i % 2 ? FC_VALID : ft_pick_class());
        if (f.len > 0) {
            (void)tr_send(&b, f.bytes, f.len);
        }
    }
    (void)tp_progress(b.tp);
    tr_close(&b);
}

/* Sends f on acme's client, waits for its answer, judges it. */
static void ft_send_judge(ft_frame_t *f)
{
    size_t want = T.a.n_ans + T.a.n_bad + 1;
    tr_answer_t *a;

    T.cur = f;
    FT_CHECK(tr_send(&T.a, f->bytes, f->len) == ST_OK, "sending a frame failed");
    FT_CHECK(tr_wait(&T.a, want, FT_WAIT_MS) == want && T.a.n_bad == 0, "no answer within %d ms",
             FT_WAIT_MS);
    a = tr_find(&T.a, f->id);
    FT_CHECK(a != NULL, "the answer has another call id");
    ft_judge(f, a);
}

/* Lines of the daemon's log so far. */
static size_t ft_log_lines(void)
{
    char line[1024];
    size_t n = 0;
    FILE *f = fopen(T.cl.node[0].log, "r");

    if (f == NULL) {
        return 0;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        n++;
    }
    fclose(f);
    return n;
}

static void ft_noreply_done(void *request, ucs_status_t status, void *user)
{
    (void)status;
    (*(int *)user)--;
    ucp_request_free(request);
}

/*
 * A peer that speaks UCX itself and sends frames as active messages without
 * a reply endpoint (strata's own transport always offers one), some of them
 * large and by rendezvous: the daemon has no way to answer them, and must
 * neither crash nor write a log line for each (a flood of them is not a
 * flood of the log).
 */
void ft_noreply(void)
{
    const uint8_t *addr = T.a.hello->transport_address.data;
    size_t addr_len = T.a.hello->transport_address.len, before = ft_log_lines(), after;
    ucp_params_t pp = {.field_mask = UCP_PARAM_FIELD_FEATURES, .features = UCP_FEATURE_AM};
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = UCS_THREAD_MODE_SINGLE};
    ucp_context_h ctx;
    ucp_worker_h w;
    ucp_ep_h ep;
    ucp_ep_params_t ep_params;
    ucp_config_t *config;
    int pending = 0, n = 1000;
    ft_frame_t f;

    /* The envelope (24 bytes: docs/transport.md) and the 8-byte host id. */
    FT_CHECK(addr_len > 32, "the daemon's transport address is %zu bytes", addr_len);
    FT_CHECK(ucp_config_read(NULL, NULL, &config) == UCS_OK, "ucp_config_read failed");
    FT_CHECK(ucp_init(&pp, config, &ctx) == UCS_OK, "ucp_init failed");
    ucp_config_release(config);
    FT_CHECK(ucp_worker_create(ctx, &wp, &w) == UCS_OK, "ucp_worker_create failed");
    memset(&ep_params, 0, sizeof(ep_params));
    ep_params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    ep_params.address = (const ucp_address_t *)(addr + 32);
    ep_params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    if (ucp_ep_create(w, &ep_params, &ep) != UCS_OK) {
        ep_params.err_mode = UCP_ERR_HANDLING_MODE_NONE; /* shared memory: no detection */
        FT_CHECK(ucp_ep_create(w, &ep_params, &ep) == UCS_OK, "ucp_ep_create failed");
    }
    for (int i = 0; i < n; i++) {
        ucp_request_param_t rp = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                                                  UCP_OP_ATTR_FIELD_USER_DATA |
                                                  UCP_OP_ATTR_FIELD_FLAGS,
                                  .cb = {.send = ft_noreply_done},
                                  .user_data = &pending,
                                  .flags = UCP_AM_SEND_FLAG_EAGER};
        ucs_status_ptr_t req;

        /* Every 50th is 1 MiB and more, sent as UCX likes (a rendezvous):
         * the daemon's other path of receiving a message. */
        ft_build(&f, i % 50 == 7 ? FC_OVERSIZE : i % 3 == 0 ? FC_VALID : FC_BAD_KEY);
        if (f.cls == FC_OVERSIZE) {
            rp.flags = 0;
        }
        req = ucp_am_send_nbx(ep, 7 /* STT_UCX_AM_ID */, NULL, 0, f.bytes, f.len, &rp);
        FT_CHECK(!UCS_PTR_IS_ERR(req), "ucp_am_send_nbx failed");
        pending += req != NULL;
        while (pending > 64) {
            ucp_worker_progress(w);
        }
    }
    {
        uint64_t until = (uint64_t)(fz_now() * 1000) + 10000;

        while (pending > 0 && (uint64_t)(fz_now() * 1000) < until) {
            ucp_worker_progress(w);
        }
        FT_CHECK(pending == 0, "%d frames without a reply endpoint not sent", pending);
    }
    /* Valid calls from the real client come after them: answered in turn. */
    tr_forget(&T.a);
    for (int i = 0; i < 4; i++) {
        ft_build(&f, FC_VALID);
        ft_send_judge(&f);
    }
    {
        ucp_request_param_t rp = {.op_attr_mask = 0};
        ucs_status_ptr_t req = ucp_ep_close_nbx(ep, &rp);

        while (req != NULL && !UCS_PTR_IS_ERR(req) &&
               ucp_request_check_status(req) == UCS_INPROGRESS) {
            ucp_worker_progress(w);
        }
        if (req != NULL && !UCS_PTR_IS_ERR(req)) {
            ucp_request_free(req);
        }
    }
    ucp_worker_destroy(w);
    ucp_cleanup(ctx);
    ft_check_alive();
    after = ft_log_lines();
    FT_CHECK(after - before < 100, "%d frames without a reply endpoint wrote %zu log lines", n,
             after - before);
}

/* Stores the chain through libstrata, as a worker would. */
void ft_store_chain(void)
{
    st_client_params_t p = {0};
    st_client_t *c = NULL;
    uint32_t *tok;
    size_t bt, nb = 0;
    st_put_op_t *ops = fz_alloc(2 * FT_CHAIN * sizeof(*ops));
    st_handle_t *h = NULL;

    p.field_mask = ST_CLIENT_FIELD_NODES | ST_CLIENT_FIELD_TENANT | ST_CLIENT_FIELD_MODEL |
                   ST_CLIENT_FIELD_TOKEN | ST_CLIENT_FIELD_TIMEOUT | ST_CLIENT_FIELD_TRANSPORT;
    p.nodes = T.cl.node[0].addr;
    p.tenant = "acme";
    p.model = "fz";
    p.token = T.tenants.t[0].token;
    p.timeout_ms = 10000;
    p.transport = "ucx";
    FT_CHECK(st_client_connect(&p, &c) == ST_OK, "libstrata cannot connect");
    bt = st_client_block_tokens(c);
    tok = fz_alloc(FT_CHAIN * bt * sizeof(*tok));
    for (size_t i = 0; i < FT_CHAIN * bt; i++) {
        tok[i] = (uint32_t)(XXH3_64bits_withSeed(&i, sizeof(i), 77) % 150000);
    }
    FT_CHECK(st_client_hash(c, tok, FT_CHAIN * bt, NULL, 0, T.chain, FT_CHAIN, &nb) == ST_OK &&
                 nb == FT_CHAIN,
             "st_client_hash failed");
    for (size_t b = 0; b < FT_CHAIN; b++) {
        for (uint16_t l = 0; l < 2; l++) {
            uint8_t *d = T.data[2 * b + l];

            fz_fill(&T.r, d, FT_OBJ);
            ops[2 * b + l] = (st_put_op_t){b, ST_KIND_KV, l, d, FT_OBJ, 0, 0};
        }
    }
    FT_CHECK(st_client_put(c, T.chain, FT_CHAIN, ops, 2 * FT_CHAIN, 0, &h) == ST_OK &&
                 st_handle_wait(h, 60000) == ST_OK,
             "the chain cannot be stored");
    st_handle_release(h);
    for (size_t i = 0; i < 2 * FT_CHAIN; i++) {
        FT_CHECK(ops[i].status == ST_OK, "object %zu not stored: %s", i,
                 st_strerror(ops[i].status));
    }
    T.lib = c;
}

/* libstrata still finds the whole chain and reads it byte for byte (its
 * Lookup and Locate go over the transport too). */
void ft_check_lib(void)
{
    st_lookup_result_t lr;
    st_get_op_t ops[2 * FT_CHAIN];
    uint8_t *buf = fz_alloc(2 * FT_CHAIN * FT_OBJ);
    st_handle_t *h = NULL;

    FT_CHECK(st_client_lookup(T.lib, T.chain, FT_CHAIN, 0, &lr) == ST_OK &&
                 lr.matched_blocks == FT_CHAIN,
             "libstrata's lookup matched %llu of %d blocks", (unsigned long long)lr.matched_blocks,
             FT_CHAIN);
    memset(ops, 0, sizeof(ops));
    for (size_t i = 0; i < 2 * FT_CHAIN; i++) {
        ops[i].block = i / 2;
        ops[i].kind = ST_KIND_KV;
        ops[i].layer = (uint16_t)(i % 2);
        ops[i].dst = buf + i * FT_OBJ;
        ops[i].dst_len = FT_OBJ;
    }
    FT_CHECK(st_client_get(T.lib, T.chain, FT_CHAIN, ops, 2 * FT_CHAIN, &h) == ST_OK &&
                 st_handle_wait(h, 60000) == ST_OK,
             "libstrata's get failed");
    st_handle_release(h);
    for (size_t i = 0; i < 2 * FT_CHAIN; i++) {
        FT_CHECK(ops[i].status == ST_OK && ops[i].length == FT_OBJ &&
                     memcmp(buf + i * FT_OBJ, T.data[i], FT_OBJ) == 0,
                 "libstrata read object %zu wrong (%s)", i, st_strerror(ops[i].status));
    }
}

/*
 * Sends the frame saved in path (a failure's /tmp/fuzz_tcall-*.bin) alone to
 * the fresh daemon and judges its answer. The saved frame presents the key
 * of the run that failed: frames that presented the key are sent with this
 * run's key in its place (same length), so that they reach the handler again.
 */
int ft_replay(const char *path)
{
    FILE *fp = fopen(path, "rb");
    ft_frame_t f;
    long n;
    uint64_t id = 0;
    uint32_t method = 0;
    size_t blen = 0;

    FT_CHECK(fp != NULL && fseek(fp, 0, SEEK_END) == 0 && (n = ftell(fp)) >= 0, "cannot read %s",
             path);
    memset(&f, 0, sizeof(f));
    f.len = (size_t)n;
    f.bytes = fz_alloc(f.len + 1);
    rewind(fp);
    FT_CHECK(fread(f.bytes, 1, f.len, fp) == f.len, "cannot read %s", path);
    fclose(fp);
    if (f.len >= FT_HDR + T.a.key_len && fz_get32(f.bytes + 16) == T.a.key_len) {
        memcpy(f.bytes + FT_HDR, T.a.key, T.a.key_len); /* the key of this run */
    }
    f.cls = FC_FRAME_BYTES;
    f.expect = ft_reference(f.bytes, f.len, T.a.key, T.a.key_len, &id, &method, &blen);
    f.id = id;
    f.method = method;
    fz_logf(&f.log, "replay of %s", path);
    printf("test_fuzz_tcall: replaying %zu bytes from %s: expected %s\n", f.len, path,
           fe_names[f.expect]);
    if (f.expect == FE_DROP) {
        T.cur = &f;
        FT_CHECK(tr_send(&T.a, f.bytes, f.len) == ST_OK || f.len == 0, "sending failed");
        tr_idle(&T.a, 300);
        FT_CHECK(T.a.n_ans == 0, "a frame without a call id was answered");
    } else {
        tr_forget(&T.a);
        ft_send_judge(&f);
        printf("test_fuzz_tcall: answered code %u (%s), %zu bytes\n", T.a.ans[0].code,
               T.a.ans[0].msg, T.a.ans[0].body_len);
    }
    ft_check_alive();
    st_client_close(T.lib);
    tr_close(&T.a);
    tr_close(&T.b);
    FT_CHECK(tc_stop(&T.cl, 0, 30000) == 0, "the daemon did not exit 0 on SIGTERM");
    tc_stop_all(&T.cl);
    tt_cleanup(&T.tenants);
    fz_arena_reset();
    return 0;
}

/*
 * SIGTERM while frames keep coming: the daemon answers them (OK while it
 * serves, UNAVAILABLE once it is stopping, PERMISSION_DENIED or
 * UNAUTHENTICATED without the key, as in the main run)
 * or stops answering, and exits 0. Returns its exit status.
 */
int ft_stop_under_load(void)
{
    pid_t pid = T.cl.node[0].pid;
    int status = 0, sent = 0;
    double t0 = fz_now(), until = t0 + 30;
    int sent_at_exit = -1;
    ft_frame_t f;

    tr_forget(&T.a);
    srpc_channel_close(T.a.ch); /* an open channel holds the daemon's stop for its grace */
    T.a.ch = NULL;
    FT_CHECK(kill(pid, SIGTERM) == 0, "cannot signal the daemon");
    while (fz_now() < until) {
        if (waitpid(pid, &status, WNOHANG) == pid) {
            T.cl.node[0].pid = 0;
            sent_at_exit = sent;
            break;
        }
        /* At most 32 unanswered: a dead peer's backlog would hold our
         * transport's teardown for its close timeout. */
        if (sent < 20000 && (size_t)sent < T.a.n_ans + 32) {
            ft_build(&f, sent % 2 ? FC_VALID : FC_BAD_KEY);
            (void)tr_send(&T.a, f.bytes, f.len); /* refused once the peer is gone */
            sent++;
        }
        (void)tp_progress(T.a.tp);
        if (sent % 256 == 0) {
            fz_arena_reset();
        }
    }
    FT_CHECK(T.cl.node[0].pid == 0, "the daemon did not exit within 30 s of SIGTERM");
    FT_CHECK(T.a.n_bad == 0, "an answer while stopping is not a response frame: %s", T.a.bad_why);
    for (size_t i = 0; i < T.a.n_ans; i++) {
        uint32_t c = T.a.ans[i].code;

        FT_CHECK(c == GC_OK || c == GC_DENIED || c == GC_UNAUTHENTICATED || c == 14,
                 "an answer while stopping: code %u (%s)", c, T.a.ans[i].msg);
    }
    printf("test_fuzz_tcall: SIGTERM under %d frames, %zu answered; exited after %.2f s\n",
           sent_at_exit, T.a.n_ans, fz_now() - t0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
