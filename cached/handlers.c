/*
 * handlers.c - the method table of stratad: every method's handler, timed and
 * counted by one dispatch. The daemon serves this table; nothing below it
 * (handlers_*.c, handlers_common.c) refers back to it.
 */
#include "handlers.h"

#include <stdint.h>

#include "clock.h"

/* The handlers, in srpc_cache_method_id_t order. */
static const srpc_handler_fn cd_h_impl[SRPC_CACHE_N_METHODS] = {
    cd_h_hello,        cd_h_lookup,         cd_h_locate,      cd_h_reserve,
    cd_h_commit,       cd_h_abort,          cd_h_release,     cd_h_put,
    cd_h_get,          cd_h_delete,         cd_h_pin,         cd_h_unpin,
    cd_h_session_open, cd_h_session_append, cd_h_session_get, cd_h_session_close,
    cd_h_stats,        cd_h_cluster_lookup, cd_h_score,       cd_h_replicate,
    cd_h_drain,
};

/* Every call goes through here: the handler, timed and counted. */
static st_status_t cd_h_dispatch(srpc_ctx_t *ctx, const ProtobufCMessage *req,
                                 ProtobufCMessage *resp, void *arg)
{
    int m = (int)(intptr_t)arg;
    uint64_t t0 = cm_mono_ns();
    st_status_t status;

    status = cd_h_impl[m](ctx, req, resp, NULL);
    cd_obs_call(cd_h_daemon(ctx)->obs, m, cm_mono_ns() - t0, status);
    return status;
}

#define CD_M(id)                                                          \
    {                                                                     \
        &srpc_cache_methods[id], cd_h_dispatch, (void *)(intptr_t)(id), 0 \
    }
/* Hello may come without metadata token (its body's auth_token), so it is
 * parsed before it is authenticated: its size is bounded tightly. */
#define CD_HELLO_MAX_BYTES (64u << 10)
const srpc_method_def_t cd_method_table[SRPC_CACHE_N_METHODS] = {
    {&srpc_cache_methods[SRPC_CACHE_HELLO], cd_h_dispatch, (void *)(intptr_t)SRPC_CACHE_HELLO,
     CD_HELLO_MAX_BYTES},
    CD_M(SRPC_CACHE_LOOKUP),
    CD_M(SRPC_CACHE_LOCATE),
    CD_M(SRPC_CACHE_RESERVE),
    CD_M(SRPC_CACHE_COMMIT),
    CD_M(SRPC_CACHE_ABORT),
    CD_M(SRPC_CACHE_RELEASE),
    CD_M(SRPC_CACHE_PUT),
    CD_M(SRPC_CACHE_GET),
    CD_M(SRPC_CACHE_DELETE),
    CD_M(SRPC_CACHE_PIN),
    CD_M(SRPC_CACHE_UNPIN),
    CD_M(SRPC_CACHE_OPEN_SESSION),
    CD_M(SRPC_CACHE_APPEND_SESSION),
    CD_M(SRPC_CACHE_GET_SESSION),
    CD_M(SRPC_CACHE_CLOSE_SESSION),
    CD_M(SRPC_CACHE_STATS),
    CD_M(SRPC_CACHE_CLUSTER_LOOKUP),
    CD_M(SRPC_CACHE_SCORE),
    CD_M(SRPC_CACHE_REPLICATE),
    CD_M(SRPC_CACHE_DRAIN),
};
#undef CD_M
const size_t cd_method_table_len = SRPC_CACHE_N_METHODS;
