/* client_fixture.c - see client_fixture.h. */
#include "client_fixture.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

void cf_params(st_client_params_t *p, const char *nodes, uint32_t timeout_ms)
{
    *p = (st_client_params_t){0};
    p->field_mask = ST_CLIENT_FIELD_NODES | ST_CLIENT_FIELD_TIMEOUT;
    p->nodes = nodes;
    p->timeout_ms = timeout_ms;
}

void cf_params_session(st_client_params_t *p, const char *nodes, const char *model,
                       uint32_t timeout_ms)
{
    cf_params(p, nodes, timeout_ms);
    p->field_mask |=
        ST_CLIENT_FIELD_TENANT | ST_CLIENT_FIELD_MODEL | ST_CLIENT_FIELD_HEALTH_INTERVAL;
    p->tenant = "acme";
    p->model = model;
    p->health_interval_ms = 100;
}

void cf_params_transport(st_client_params_t *p, const char *nodes, const char *transport,
                         uint32_t timeout_ms)
{
    cf_params(p, nodes, timeout_ms);
    p->field_mask |= ST_CLIENT_FIELD_TRANSPORT;
    p->transport = transport;
}

st_client_t *cf_connect(const st_client_params_t *p)
{
    st_client_t *c = NULL;
    st_status_t st = st_client_connect(p, &c);

    if (st != ST_OK) {
        fail_msg("connect to %s: %s (%s)", p->nodes, st_strerror(st), st_client_last_error());
    }
    return c;
}

st_client_t *cf_connect_retry(const st_client_params_t *p, int tries)
{
    st_client_t *c = NULL;
    st_status_t st = ST_ERR_UNAVAILABLE;

    for (int t = 0; t < tries && st == ST_ERR_UNAVAILABLE; t++) {
        st = st_client_connect(p, &c);
        if (st == ST_ERR_UNAVAILABLE) {
            usleep(100 * 1000);
        }
    }
    assert_int_equal(st, ST_OK);
    return c;
}

void cf_tokens(uint32_t *tok, size_t from, size_t to, uint64_t stream)
{
    for (size_t i = from; i < to; i++) {
        tok[i] = (uint32_t)(XXH3_64bits_withSeed(&i, sizeof(i), stream) % 150000);
    }
}

uint32_t *cf_token_buf(st_client_t *c, size_t n_blocks)
{
    uint32_t *tok = malloc(sizeof(*tok) * n_blocks * st_client_block_tokens(c));

    assert_non_null(tok);
    return tok;
}

st_hash_t *cf_hash(st_client_t *c, uint32_t *tok, size_t n_blocks)
{
    size_t nb = 0;
    st_hash_t *chain = malloc(sizeof(*chain) * n_blocks);

    assert_non_null(chain);
    assert_int_equal(
        st_client_hash(c, tok, n_blocks * st_client_block_tokens(c), NULL, 0, chain, n_blocks, &nb),
        ST_OK);
    assert_int_equal(nb, n_blocks);
    free(tok);
    return chain;
}

st_hash_t *cf_chain(st_client_t *c, uint64_t stream, size_t n_blocks)
{
    uint32_t *tok = cf_token_buf(c, n_blocks);

    cf_tokens(tok, 0, n_blocks * st_client_block_tokens(c), stream);
    return cf_hash(c, tok, n_blocks);
}

void cf_session_hash(const char *id, st_hash_t *out)
{
    XXH3_state_t st;
    XXH128_hash_t h;

    XXH3_128bits_reset(&st);
    XXH3_128bits_update(&st, "strata-session-v1", 17);
    XXH3_128bits_update(&st, id, strlen(id));
    h = XXH3_128bits_digest(&st);
    for (int i = 0; i < 8; i++) {
        out->b[i] = (uint8_t)(h.low64 >> (8 * i));
        out->b[8 + i] = (uint8_t)(h.high64 >> (8 * i));
    }
}
