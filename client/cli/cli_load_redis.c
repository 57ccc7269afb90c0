/*
 * cli_load_redis.c - `strata load --peer redis:HOST:PORT`: the same calls
 * against a real Redis through hiredis, one connection per engine, so that
 * the same generator, the same key mix and the same object sizes measure
 * the peer.
 *
 * Keys: an object is "o" followed by its 16-byte block hash, its kind (one
 * byte) and its layer (two bytes, little-endian): 20 bytes, binary. A
 * session is "s:" and its id. The block hashes are those strata would use,
 * hashed from a seed of zeros in place of the namespace's.
 *   lookup   EXISTS of each block's KV object of layer 0, pipelined; the
 *            matched prefix is the leading run of ones
 *   get      one MGET of the objects
 *   rows     GETRANGE of each row, pipelined
 *   put      SET of each object, pipelined
 *   session  SET of "s:ID" to the head and the length
 * Replies map to statuses: no reply (the connection failed)
 * ST_ERR_UNAVAILABLE; an OOM error (maxmemory with noeviction)
 * ST_ERR_EXHAUSTED; any other error reply ST_ERR_PROTOCOL.
 */
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_load.h"

#define LR_KEY 20

typedef struct load_redis {
    load_backend_t base;
    redisContext *rc;
} load_redis_t;

static void lr_key(uint8_t key[LR_KEY], const st_hash_t *h, int kind, int layer)
{
    key[0] = 'o';
    memcpy(key + 1, h->b, ST_HASH_BYTES);
    key[17] = (uint8_t)kind;
    key[18] = (uint8_t)(layer & 0xff);
    key[19] = (uint8_t)(layer >> 8);
}

/* The status of a reply (NULL: the connection failed). */
static st_status_t lr_status(const redisReply *rep)
{
    if (rep == NULL) {
        return ST_ERR_UNAVAILABLE;
    }
    if (rep->type == REDIS_REPLY_ERROR) {
        return strncmp(rep->str, "OOM", 3) == 0 ? ST_ERR_EXHAUSTED : ST_ERR_PROTOCOL;
    }
    return ST_OK;
}

/* Reads the next pipelined reply into *rep_p; returns its status. */
static st_status_t lr_reply(load_redis_t *r, redisReply **rep_p)
{
    void *rep = NULL;

    if (redisGetReply(r->rc, &rep) != REDIS_OK) {
        *rep_p = NULL;
        return ST_ERR_UNAVAILABLE;
    }
    *rep_p = rep;
    return lr_status(rep);
}

static st_status_t lr_first_hash(load_backend_t *b, const uint32_t *tokens, uint32_t n,
                                 st_hash_t *out)
{
    static const st_hash_t zero;

    (void)b;
    return st_hash_block(&zero, tokens, n, NULL, NULL, 0, out);
}

static st_status_t lr_lookup(load_backend_t *b, const st_hash_t *chain, size_t nb,
                             uint64_t *matched_p)
{
    load_redis_t *r = (load_redis_t *)b;
    st_status_t st = ST_OK;
    uint64_t matched = 0;
    int run = 1;

    for (size_t i = 0; i < nb; i++) {
        uint8_t key[LR_KEY];

        lr_key(key, &chain[i], ST_KIND_KV, 0);
        redisAppendCommand(r->rc, "EXISTS %b", key, (size_t)LR_KEY);
    }
    for (size_t i = 0; i < nb; i++) {
        redisReply *rep;
        st_status_t s = lr_reply(r, &rep);

        if (s != ST_OK) {
            st = st == ST_OK ? s : st;
            run = 0;
        } else if (run && rep->type == REDIS_REPLY_INTEGER && rep->integer == 1) {
            matched++;
        } else {
            run = 0;
        }
        freeReplyObject(rep);
        if (s == ST_ERR_UNAVAILABLE) {
            return s; /* the connection is gone: no more replies */
        }
    }
    if (st == ST_OK) {
        *matched_p = matched;
    }
    return st;
}

/* Whole objects: one MGET. */
static st_status_t lr_get_whole(load_redis_t *r, const st_hash_t *chain, st_get_op_t *ops, size_t n)
{
    const char **argv = malloc(sizeof(*argv) * (n + 1));
    size_t *argl = malloc(sizeof(*argl) * (n + 1));
    uint8_t *keys = malloc(LR_KEY * n);
    redisReply *rep = NULL;
    st_status_t st = ST_ERR_NOMEM;

    if (argv != NULL && argl != NULL && keys != NULL) {
        argv[0] = "MGET";
        argl[0] = 4;
        for (size_t i = 0; i < n; i++) {
            lr_key(keys + i * LR_KEY, &chain[ops[i].block], ops[i].kind, ops[i].layer);
            argv[i + 1] = (const char *)(keys + i * LR_KEY);
            argl[i + 1] = LR_KEY;
        }
        rep = redisCommandArgv(r->rc, (int)n + 1, argv, argl);
        st = lr_status(rep);
        if (st == ST_OK && (rep->type != REDIS_REPLY_ARRAY || rep->elements != n)) {
            st = ST_ERR_PROTOCOL;
        }
        for (size_t i = 0; st == ST_OK && i < n; i++) {
            const redisReply *e = rep->element[i];

            ops[i].status = e->type == REDIS_REPLY_STRING
                                ? (e->len <= ops[i].dst_len ? ST_OK : ST_ERR_INVALID)
                                : ST_ERR_NOT_FOUND;
            ops[i].length = ops[i].status == ST_OK ? e->len : 0;
            if (ops[i].status == ST_OK) {
                memcpy(ops[i].dst, e->str, e->len);
            }
        }
    }
    freeReplyObject(rep);
    free(argv), free(argl), free(keys);
    return st;
}

/* Rows: a GETRANGE per row, pipelined; a row past the end of the object is a miss. */
static st_status_t lr_get_rows(load_redis_t *r, const st_hash_t *chain, st_get_op_t *ops, size_t n)
{
    st_status_t st = ST_OK;

    for (size_t i = 0; i < n; i++) {
        uint8_t key[LR_KEY];

        lr_key(key, &chain[ops[i].block], ops[i].kind, ops[i].layer);
        for (uint32_t j = 0; j < ops[i].n_rows; j++) {
            long long off = (long long)ops[i].rows[j] * ops[i].row_bytes;

            redisAppendCommand(r->rc, "GETRANGE %b %lld %lld", key, (size_t)LR_KEY, off,
                               off + ops[i].row_bytes - 1);
        }
    }
    for (size_t i = 0; i < n; i++) {
        ops[i].status = ST_OK;
        ops[i].length = 0;
        for (uint32_t j = 0; j < ops[i].n_rows; j++) {
            redisReply *rep;
            st_status_t s = lr_reply(r, &rep);

            if (s == ST_ERR_UNAVAILABLE) {
                return s;
            }
            if (s != ST_OK) {
                st = st == ST_OK ? s : st;
            } else if (rep->type != REDIS_REPLY_STRING || rep->len != ops[i].row_bytes) {
                ops[i].status = ST_ERR_NOT_FOUND; /* GETRANGE of a missing key: "" */
            } else {
                memcpy((uint8_t *)ops[i].dst + (size_t)j * ops[i].row_bytes, rep->str, rep->len);
            }
            freeReplyObject(rep);
        }
        ops[i].length = ops[i].status == ST_OK ? (size_t)ops[i].n_rows * ops[i].row_bytes : 0;
    }
    return st;
}

static st_status_t lr_get(load_backend_t *b, const st_hash_t *chain, size_t nb, st_get_op_t *ops,
                          size_t n)
{
    (void)nb;
    if (n == 0) {
        return ST_OK;
    }
    return ops[0].n_rows > 0 ? lr_get_rows((load_redis_t *)b, chain, ops, n)
                             : lr_get_whole((load_redis_t *)b, chain, ops, n);
}

static st_status_t lr_put(load_backend_t *b, const st_hash_t *chain, size_t nb, st_put_op_t *ops,
                          size_t n)
{
    load_redis_t *r = (load_redis_t *)b;

    (void)nb;
    for (size_t i = 0; i < n; i++) {
        uint8_t key[LR_KEY];

        lr_key(key, &chain[ops[i].block], ops[i].kind, ops[i].layer);
        redisAppendCommand(r->rc, "SET %b %b", key, (size_t)LR_KEY, ops[i].src, ops[i].len);
    }
    for (size_t i = 0; i < n; i++) {
        redisReply *rep;

        ops[i].status = lr_reply(r, &rep);
        freeReplyObject(rep);
        if (ops[i].status == ST_ERR_UNAVAILABLE) {
            for (size_t j = i + 1; j < n; j++) {
                ops[j].status = ST_ERR_UNAVAILABLE;
            }
            return ST_ERR_UNAVAILABLE;
        }
    }
    return ST_OK;
}

static st_status_t lr_session_set(load_backend_t *b, const char *sid, const st_hash_t *head,
                                  uint64_t length)
{
    load_redis_t *r = (load_redis_t *)b;
    char hex[33];
    redisReply *rep;
    st_status_t st;

    st_hash_to_hex(head, hex);
    rep = redisCommand(r->rc, "SET s:%s %s:%llu", sid, hex, (unsigned long long)length);
    st = lr_status(rep);
    freeReplyObject(rep);
    return st;
}

static st_status_t lr_session_open(load_backend_t *b, const char *sid)
{
    static const st_hash_t zero;

    return lr_session_set(b, sid, &zero, 0);
}

static void lr_close(load_backend_t *b)
{
    load_redis_t *r = (load_redis_t *)b;

    redisFree(r->rc);
    free(r);
}

static const load_backend_ops_t load_redis_ops = {
    lr_first_hash, lr_lookup, lr_get, lr_put, lr_session_open, lr_session_set, lr_close,
};

st_status_t load_backend_redis(const char *host, int port, load_backend_t **b_p)
{
    load_redis_t *r = calloc(1, sizeof(*r));

    if (r == NULL) {
        return ST_ERR_NOMEM;
    }
    r->rc = redisConnect(host, port);
    if (r->rc == NULL || r->rc->err) {
        fprintf(stderr, "strata load: cannot connect to redis at %s:%d: %s\n", host, port,
                r->rc ? r->rc->errstr : "out of memory");
        if (r->rc != NULL) {
            redisFree(r->rc);
        }
        free(r);
        return ST_ERR_UNAVAILABLE;
    }
    r->base.ops = &load_redis_ops;
    r->base.block_tokens = ST_BLOCK_TOKENS_DEFAULT;
    *b_p = &r->base;
    return ST_OK;
}
