/*
 * cli_load_backend.c - `strata load`'s calls over libstrata: a lookup is
 * st_client_lookup of the whole chain (layers 0: any object of a block
 * counts), gets and puts are one st_client_get / st_client_put batch waited
 * for on the engine's thread, sessions are st_session_open / _append.
 */
#include <stdlib.h>

#include "cli_load.h"

typedef struct load_strata {
    load_backend_t base;
    st_client_t *c;
} load_strata_t;

static st_status_t ls_first_hash(load_backend_t *b, const uint32_t *tokens, uint32_t n,
                                 st_hash_t *out)
{
    size_t nb = 0;
    st_status_t st = st_client_hash(((load_strata_t *)b)->c, tokens, n, NULL, 0, out, 1, &nb);

    return st == ST_OK && nb != 1 ? ST_ERR_INVALID : st;
}

static st_status_t ls_lookup(load_backend_t *b, const st_hash_t *chain, size_t nb,
                             uint64_t *matched_p)
{
    st_lookup_result_t r;
    st_status_t st = st_client_lookup(((load_strata_t *)b)->c, chain, nb, 0, &r);

    if (st == ST_OK) {
        *matched_p = r.matched_blocks;
    }
    return st;
}

static st_status_t ls_get(load_backend_t *b, const st_hash_t *chain, size_t nb, st_get_op_t *ops,
                          size_t n)
{
    st_handle_t *h;
    st_status_t st = st_client_get(((load_strata_t *)b)->c, chain, nb, ops, n, &h);

    if (st == ST_OK) {
        st = st_handle_wait(h, -1);
        st_handle_release(h);
    }
    return st;
}

static st_status_t ls_put(load_backend_t *b, const st_hash_t *chain, size_t nb, st_put_op_t *ops,
                          size_t n)
{
    st_handle_t *h;
    st_status_t st = st_client_put(((load_strata_t *)b)->c, chain, nb, ops, n, 0, &h);

    if (st == ST_OK) {
        st = st_handle_wait(h, -1);
        st_handle_release(h);
    }
    return st;
}

static st_status_t ls_session_open(load_backend_t *b, const char *sid)
{
    st_session_info_t info;

    return st_session_open(((load_strata_t *)b)->c, sid, 0, &info);
}

static st_status_t ls_session_append(load_backend_t *b, const char *sid, const st_hash_t *head,
                                     uint64_t length)
{
    return st_session_append(((load_strata_t *)b)->c, sid, head, length);
}

static void ls_close(load_backend_t *b)
{
    free(b);
}

static const load_backend_ops_t load_strata_ops = {
    ls_first_hash, ls_lookup, ls_get, ls_put, ls_session_open, ls_session_append, ls_close,
};

st_status_t load_backend_strata(st_client_t *c, load_backend_t **b_p)
{
    load_strata_t *s = calloc(1, sizeof(*s));

    if (s == NULL) {
        return ST_ERR_NOMEM;
    }
    s->base.ops = &load_strata_ops;
    s->base.block_tokens = st_client_block_tokens(c);
    s->c = c;
    *b_p = &s->base;
    return ST_OK;
}
