/*
 * server_call.c - one call of the server: its context (token, principal,
 * metadata, peer, deadline, arena), authentication, unpacking the request
 * and running the method's handler; for calls that gRPC brings (server.c)
 * and for those that come over the data plane's transport
 * (srpc_server_invoke).
 */
#include "srpc_internal.h"
#include "server_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/support/alloc.h>

#include "log.h"

/* ----------------------------------------------------------- call context -- */

const char *srpc_ctx_token(const srpc_ctx_t *ctx)
{
    return ctx->token;
}

void *srpc_ctx_principal(srpc_ctx_t *ctx)
{
    return ctx->srv->authenticate != NULL ? ctx->principal : NULL;
}

int srpc_ctx_metadata(const srpc_ctx_t *ctx, const char *key, char *buf, size_t cap)
{
    if (ctx->call == NULL || cap == 0) {
        return 0;
    }
    for (size_t i = 0; i < ctx->call->md.count; i++) {
        const grpc_metadata *m = &ctx->call->md.metadata[i];
        size_t len = GRPC_SLICE_LENGTH(m->value);

        if (grpc_slice_str_cmp(m->key, key) != 0 || len >= cap) {
            continue;
        }
        memcpy(buf, GRPC_SLICE_START_PTR(m->value), len);
        buf[len] = '\0';
        return 1;
    }
    return 0;
}

/*
 * Runs the server's authenticate callback for ctx (token already found).
 * Returns GRPC_STATUS_OK, or the refusal's code with msg set.
 */
int srpc_authenticate(srpc_ctx_t *ctx, char *msg, size_t msg_cap)
{
    srpc_server_t *srv = ctx->srv;
    st_status_t st;

    if (srv->authenticate == NULL || ctx->m->method == &srpc_health_check_method) {
        return GRPC_STATUS_OK; /* health checks stay unauthenticated */
    }
    memset(ctx->principal, 0, sizeof(ctx->principal));
    msg[0] = '\0';
    st = srv->authenticate(srv->user_arg, ctx->m->method->path, ctx->token, srpc_ctx_peer(ctx),
                           srpc_ctx_peer_identity(ctx), ctx->principal, msg, msg_cap);
    if (st == ST_OK) {
        return GRPC_STATUS_OK;
    }
    if (msg[0] == '\0') {
        snprintf(msg, msg_cap, "%s: %s", ctx->m->method->path, st_strerror(st));
    }
    return st_status_to_grpc(st);
}

const char *srpc_ctx_method(const srpc_ctx_t *ctx)
{
    return ctx->m->method->path;
}

const char *srpc_ctx_peer(srpc_ctx_t *ctx)
{
    if (ctx->call == NULL) {
        return "transport"; /* srpc_server_invoke() */
    }
    if (ctx->peer == NULL) {
        ctx->peer = grpc_call_get_peer(ctx->call->call);
    }
    return ctx->peer ? ctx->peer : "unknown";
}

const char *srpc_ctx_peer_identity(srpc_ctx_t *ctx)
{
    if (ctx->call == NULL || ctx->srv->tls == NULL ||
        ctx->srv->tls_client_auth == SRPC_TLS_CLIENT_AUTH_NONE) {
        return NULL;
    }
    if (!ctx->identity_done) {
        ctx->identity =
            srpc_tls_peer_cn(ctx->call->call, ctx->identity_buf, sizeof(ctx->identity_buf));
        ctx->identity_done = true;
    }
    return ctx->identity;
}

int64_t srpc_ctx_remaining_ms(const srpc_ctx_t *ctx)
{
    gpr_timespec deadline, left;

    if (ctx->call == NULL) {
        return INT64_MAX; /* srpc_server_invoke(): no deadline */
    }
    deadline = ctx->call->deadline;
    if (deadline.tv_sec == INT64_MAX) {
        return INT64_MAX;
    }
    left = gpr_time_sub(deadline, gpr_now(deadline.clock_type));
    if (left.tv_sec < 0) {
        return 0;
    }
    return left.tv_sec * 1000 + left.tv_nsec / 1000000;
}

void *srpc_ctx_server_arg(const srpc_ctx_t *ctx)
{
    return ctx->srv->user_arg;
}

bool srpc_ctx_invoked(const srpc_ctx_t *ctx)
{
    return ctx->call == NULL;
}

/*
 * Bump allocation from the context's chunks. The first chunk is the worker
 * thread's retained block (common.c), so a call whose request and response
 * fit in it allocates nothing; a chunk that runs out is followed by one at
 * least twice its size, and the largest chunk is retained for the next call.
 */
static void *srpc_ctx_bump(srpc_ctx_t *ctx, size_t size)
{
    srpc_chunk_t *chunk = ctx->chunks;
    void *p;

    size = (size + 15) & ~(size_t)15;
    if (chunk == NULL || chunk->cap - chunk->used < size) {
        size_t cap = size > 4096 ? size : 4096;

        if (chunk != NULL && cap < 2 * chunk->cap) {
            cap = 2 * chunk->cap;
        }
        if (chunk == NULL) {
            size_t got;
            srpc_chunk_t *kept = srpc_arena_take(&got);

            if (kept != NULL && got - sizeof(*kept) >= size) {
                chunk = kept;
                chunk->cap = got - sizeof(*kept);
                chunk->used = 0;
                chunk->next = NULL;
                ctx->chunks = chunk;
                goto have;
            }
            free(kept);
        }
        chunk = malloc(sizeof(*chunk) + cap);
        if (chunk == NULL) {
            return NULL;
        }
        chunk->cap = cap;
        chunk->used = 0;
        chunk->next = ctx->chunks;
        ctx->chunks = chunk;
    }
have:
    p = (char *)chunk->data + chunk->used;
    chunk->used += size;
    return p;
}

void *srpc_ctx_alloc(srpc_ctx_t *ctx, size_t size)
{
    void *p = srpc_ctx_bump(ctx, size);

    if (p != NULL) {
        memset(p, 0, size);
    }
    return p;
}

/* protobuf-c's allocator for the request: the context's arena, freed with it. */
static void *srpc_ctx_pb_alloc(void *data, size_t size)
{
    return srpc_ctx_bump(data, size);
}

static void srpc_ctx_pb_free(void *data, void *p)
{
    (void)data;
    (void)p;
}

void srpc_ctx_set_error(srpc_ctx_t *ctx, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(ctx->error, sizeof(ctx->error), fmt, ap);
    va_end(ap);
    ctx->has_error = true;
}

void srpc_ctx_set_trailer(srpc_ctx_t *ctx, const char *key, const char *value)
{
    srpc_scall_t *c = ctx->call;

    if (c == NULL) {
        return;
    }
    if (c->n_trail != 0) {
        grpc_slice_unref(c->trail.value);
    }
    c->trail.key = grpc_slice_from_static_string(key);
    c->trail.value = grpc_slice_from_copied_string(value);
    c->n_trail = 1;
}

void srpc_ctx_release(srpc_ctx_t *ctx)
{
    srpc_chunk_t *keep = NULL;

    while (ctx->chunks != NULL) {
        srpc_chunk_t *next = ctx->chunks->next;

        if (keep == NULL || ctx->chunks->cap > keep->cap) {
            free(keep);
            keep = ctx->chunks;
        } else {
            free(ctx->chunks);
        }
        ctx->chunks = next;
    }
    if (keep != NULL) {
        srpc_arena_give(keep, sizeof(*keep) + keep->cap);
    }
    if (ctx->peer != NULL) {
        gpr_free(ctx->peer);
        ctx->peer = NULL;
    }
}

/* Finds "authorization: Bearer <token>" among the call's metadata. */
void srpc_ctx_find_token(srpc_ctx_t *ctx, const grpc_metadata_array *md)
{
    static const char bearer[] = "bearer ";

    for (size_t i = 0; i < md->count; i++) {
        const grpc_metadata *m = &md->metadata[i];
        size_t len = GRPC_SLICE_LENGTH(m->value);
        const char *v = (const char *)GRPC_SLICE_START_PTR(m->value);

        if (grpc_slice_str_cmp(m->key, "authorization") != 0) {
            continue;
        }
        if (len <= sizeof(bearer) - 1 || strncasecmp(v, bearer, sizeof(bearer) - 1) != 0) {
            continue;
        }
        v += sizeof(bearer) - 1;
        len -= sizeof(bearer) - 1;
        if (len > SRPC_MAX_TOKEN) {
            continue;
        }
        memcpy(ctx->token_buf, v, len);
        ctx->token_buf[len] = '\0';
        ctx->token = ctx->token_buf;
        return;
    }
}

/* ----------------------------------------------------------- running one -- */

void srpc_ctx_start(srpc_ctx_t *ctx, srpc_server_t *srv, srpc_scall_t *c, const srpc_smethod_t *m)
{
    memset(ctx, 0, offsetof(srpc_ctx_t, token_buf));
    ctx->srv = srv;
    ctx->call = c;
    ctx->m = m;
}

int srpc_ctx_check_size(const srpc_ctx_t *ctx, size_t len, char *msg, size_t msg_cap)
{
    if (len > ctx->m->max_request_bytes) {
        snprintf(msg, msg_cap, "%s: request of %zu bytes exceeds the limit of %u bytes",
                 ctx->m->method->path, len, ctx->m->max_request_bytes);
        return GRPC_STATUS_RESOURCE_EXHAUSTED;
    }
    return GRPC_STATUS_OK;
}

int srpc_ctx_unpack(srpc_ctx_t *ctx, const uint8_t *data, size_t len, ProtobufCMessage **req_p,
                    char *msg, size_t msg_cap)
{
    ProtobufCAllocator pb_alloc = {srpc_ctx_pb_alloc, srpc_ctx_pb_free, ctx};
    const ProtobufCMessageDescriptor *req_desc = ctx->m->method->req_desc;

    /* Unpacked into the call's arena: no malloc, no free, warm memory. */
    *req_p = protobuf_c_message_unpack(req_desc, &pb_alloc, len, data);
    if (*req_p == NULL) {
        snprintf(msg, msg_cap, "%s: request of %zu bytes does not parse as %s",
                 ctx->m->method->path, len, req_desc->name);
        return GRPC_STATUS_INVALID_ARGUMENT;
    }
    return GRPC_STATUS_OK;
}

int srpc_ctx_handle(srpc_ctx_t *ctx, const ProtobufCMessage *req, ProtobufCMessage **resp_p,
                    char *msg, size_t msg_cap)
{
    const srpc_smethod_t *m = ctx->m;
    const ProtobufCMessageDescriptor *resp_desc = m->method->resp_desc;
    ProtobufCMessage *resp = srpc_ctx_alloc(ctx, resp_desc->sizeof_message);
    st_status_t st;

    if (resp == NULL) {
        snprintf(msg, msg_cap, "%s: out of memory for the response", m->method->path);
        return GRPC_STATUS_RESOURCE_EXHAUSTED;
    }
    protobuf_c_message_init(resp_desc, resp);
    st = m->handler(ctx, req, resp, m->handler_arg);
    if (st != ST_OK) {
        snprintf(msg, msg_cap, "%s", ctx->has_error ? ctx->error : st_strerror(st));
        return st_status_to_grpc(st);
    }
    *resp_p = resp;
    return GRPC_STATUS_OK;
}

/* ------------------------------------------------- calls over the transport -- */

/* Method path among the server's, or NULL. */
static srpc_smethod_t *srpc_find_method(srpc_server_t *srv, const char *path)
{
    for (size_t i = 0; i < srv->n_methods; i++) {
        if (strcmp(srv->methods[i].method->path, path) == 0) {
            return &srv->methods[i];
        }
    }
    return NULL;
}

/* Packs resp into a malloc'd buffer. */
static st_status_t srpc_pack_malloc(const ProtobufCMessage *resp, void **resp_p, size_t *len_p)
{
    size_t n = protobuf_c_message_get_packed_size(resp);

    *resp_p = n > 0 ? malloc(n) : NULL;
    if (n > 0 && *resp_p == NULL) {
        return ST_ERR_NOMEM;
    }
    *len_p = n > 0 ? protobuf_c_message_pack(resp, *resp_p) : 0;
    return ST_OK;
}

void srpc_server_count_refused(srpc_server_t *server, const char *path)
{
    srpc_smethod_t *m = srpc_find_method(server, path);

    if (m != NULL) {
        atomic_fetch_add_explicit(&m->stats.overloaded, 1, memory_order_relaxed);
    }
}

void srpc_server_invoke(srpc_server_t *srv, const char *path, const char *token,
                        const void *req_bytes, size_t len, void **resp_p, size_t *resp_len_p,
                        int *code_p, char *msg, size_t msg_cap)
{
    srpc_smethod_t *m = srpc_find_method(srv, path);
    srpc_ctx_t ctx;
    ProtobufCMessage *req, *resp;
    uint64_t start = srpc_now_ns();
    int code = GRPC_STATUS_OK;
    st_status_t st;

    *resp_p = NULL;
    *resp_len_p = 0;
    if (msg_cap > 0) {
        msg[0] = '\0';
    }
    if (m == NULL) {
        *code_p = GRPC_STATUS_UNIMPLEMENTED;
        snprintf(msg, msg_cap, "unknown method");
        return;
    }
    srpc_ctx_start(&ctx, srv, NULL, m);
    if (atomic_load(&srv->stopping)) {
        code = GRPC_STATUS_UNAVAILABLE;
        snprintf(msg, msg_cap, "%s: the server is stopping", m->method->path);
        goto out;
    }
    if (token != NULL && strlen(token) <= SRPC_MAX_TOKEN) {
        snprintf(ctx.token_buf, sizeof(ctx.token_buf), "%s", token);
        ctx.token = ctx.token_buf;
    }
    {
        char why[256];

        code = srpc_authenticate(&ctx, why, sizeof(why));
        if (code != GRPC_STATUS_OK) {
            snprintf(msg, msg_cap, "%s", why);
            goto out;
        }
    }
    code = srpc_ctx_check_size(&ctx, len, msg, msg_cap);
    if (code == GRPC_STATUS_OK) {
        code = srpc_ctx_unpack(&ctx, req_bytes, len, &req, msg, msg_cap);
    }
    if (code == GRPC_STATUS_OK) {
        code = srpc_ctx_handle(&ctx, req, &resp, msg, msg_cap);
    }
    if (code == GRPC_STATUS_OK) {
        st = srpc_pack_malloc(resp, resp_p, resp_len_p);
        if (st != ST_OK) {
            code = st_status_to_grpc(st);
            snprintf(msg, msg_cap, "%s", st_strerror(st));
        }
    }
out:
    srpc_ctx_release(&ctx);
    srpc_stats_record(&m->stats, code, (srpc_now_ns() - start) / 1000);
    if (code != GRPC_STATUS_OK) {
        lg_debug("rpc call failed method=%s route=transport code=%d msg=\"%s\"", m->method->path,
                 code, msg_cap > 0 ? msg : "");
    }
    *code_p = code;
}
