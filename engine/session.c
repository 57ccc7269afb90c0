/*
 * session.c - multi-turn conversations over the engine: the session object
 * holds the conversation's tokens, st_engine_run resumes and extends its
 * blocks in the cluster, and the cluster's session record follows the head
 * of the conversation (include/strata/engine.h, docs/engine.md "Sessions").
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "en_internal.h"

struct st_engine_session {
    st_engine_t *engine;
    const st_model_t *model;
    st_client_t *client;
    char id[64];
    uint32_t *tok; /* the conversation */
    size_t n, cap; /* tokens, capacity */
    st_session_info_t info;
    int partial; /* the open was short of write_quorum: counted at the first turn */
    /* The conversation's images: pixels copied, and their chain items. */
    st_engine_image_t *img;
    st_hash_item_t *items;
    size_t n_img, cap_img;
};

st_status_t st_engine_session_open(st_engine_t *engine, const char *id, uint64_t ttl_ms,
                                   st_engine_session_t **sess_p)
{
    st_engine_session_t *s;
    const st_model_t *model;
    st_client_t *client;
    st_write_result_t wr;
    st_status_t r;
    size_t len;

    if (!engine || !id || !sess_p) {
        lg_error("st_engine_session_open refused: NULL %s", !engine ? "engine"
                                                            : !id   ? "id"
                                                                    : "sess_p");
        return ST_ERR_INVALID;
    }
    model = en_engine_model(engine);
    client = en_engine_client(engine);
    if (!client) {
        lg_error("st_engine_session_open refused: the engine has no client id=%s", id);
        return ST_ERR_INVALID;
    }
    len = strlen(id);
    if (len == 0 || len > 63) {
        lg_error("st_engine_session_open refused: id must be 1..63 bytes id_bytes=%zu", len);
        return ST_ERR_INVALID;
    }
    s = calloc(1, sizeof(*s));
    if (!s) {
        return ST_ERR_NOMEM;
    }
    r = st_session_open_ex(client, id, ttl_ms, en_engine_durable(engine) ? ST_SESSION_DURABLE : 0,
                           &s->info, &wr);
    if (r == ST_ERR_PARTIAL) {
        /* The record is there, on fewer disks than asked: the session goes on. */
        lg_warn("session record short of write_quorum id=%s written=%u replicas=%u "
                "write_quorum=%u",
                id, wr.written, wr.replicas, wr.quorum);
        s->partial = 1;
        r = ST_OK;
    }
    if (r != ST_OK) {
        lg_error("session open failed id=%s status=%s error=\"%s\"", id, st_status_name(r),
                 st_client_last_error());
        free(s);
        return r;
    }
    s->engine = engine;
    s->model = model;
    s->client = client;
    memcpy(s->id, id, len + 1);
    lg_info("session opened id=%s length=%llu", id, (unsigned long long)s->info.length);
    *sess_p = s;
    return ST_OK;
}

/* Room for n more tokens. */
static st_status_t en_sess_grow(st_engine_session_t *s, size_t n)
{
    size_t cap = s->cap ? s->cap : 1024;
    uint32_t *t;

    if (s->n + n <= s->cap) {
        return ST_OK;
    }
    while (cap < s->n + n) {
        cap *= 2;
    }
    t = realloc(s->tok, sizeof(*t) * cap);
    if (!t) {
        lg_error("session out of memory id=%s tokens=%zu", s->id, s->n + n);
        return ST_ERR_NOMEM;
    }
    s->tok = t;
    s->cap = cap;
    return ST_OK;
}

/* Checks tokens against the vocabulary; what names the caller. */
static st_status_t en_sess_check(const st_engine_session_t *s, const uint32_t *tokens, size_t n,
                                 const char *what)
{
    uint32_t vocab = st_model_config(s->model)->vocab;

    if (!tokens || n == 0) {
        lg_error("%s refused: %s id=%s", what, !tokens ? "NULL tokens" : "no tokens", s->id);
        return ST_ERR_INVALID;
    }
    for (size_t i = 0; i < n; i++) {
        if (tokens[i] >= vocab) {
            lg_error("%s refused: token out of range id=%s index=%zu token=%u vocab=%u", what,
                     s->id, i, tokens[i], vocab);
            return ST_ERR_INVALID;
        }
    }
    return ST_OK;
}

st_status_t st_engine_session_append(st_engine_session_t *s, const uint32_t *tokens, size_t n)
{
    st_status_t r;

    if (!s) {
        lg_error("st_engine_session_append refused: NULL session");
        return ST_ERR_INVALID;
    }
    r = en_sess_check(s, tokens, n, "st_engine_session_append");
    if (r == ST_OK) {
        r = en_sess_grow(s, n);
    }
    if (r == ST_OK) {
        memcpy(s->tok + s->n, tokens, sizeof(*tokens) * n);
        s->n += n;
    }
    return r;
}

st_status_t st_engine_session_append_image(st_engine_session_t *s, const st_engine_image_t *im)
{
    uint64_t nt;
    size_t bytes;
    uint8_t *px;
    st_status_t r;

    if (!s || !im || !im->pixels) {
        lg_error("st_engine_session_append_image refused: NULL %s", !s    ? "session"
                                                                    : !im ? "image"
                                                                          : "pixels");
        return ST_ERR_INVALID;
    }
    nt = st_engine_image_tokens(im->width, im->height);
    if (im->width == 0 || im->height == 0 || im->width > ST_IMAGE_SIDE_MAX ||
        im->height > ST_IMAGE_SIDE_MAX || (im->channels != 1 && im->channels != 3) ||
        nt > ST_ENGINE_IMAGE_TOKENS_MAX) {
        lg_error("st_engine_session_append_image refused id=%s width=%u height=%u channels=%u "
                 "tokens=%llu reason=\"1..%u a side, 1 or 3 channels, at most %u tokens\"",
                 s->id, im->width, im->height, im->channels, (unsigned long long)nt,
                 ST_IMAGE_SIDE_MAX, ST_ENGINE_IMAGE_TOKENS_MAX);
        return ST_ERR_INVALID;
    }
    if (s->n_img == s->cap_img) {
        size_t cap = s->cap_img ? 2 * s->cap_img : 4;
        st_engine_image_t *ni = realloc(s->img, cap * sizeof(*ni));
        st_hash_item_t *nh = ni ? realloc(s->items, cap * sizeof(*nh)) : NULL;

        if (ni) {
            s->img = ni;
        }
        if (!nh) {
            return ST_ERR_NOMEM;
        }
        s->items = nh;
        s->cap_img = cap;
    }
    bytes = (size_t)im->width * im->height * im->channels;
    r = en_sess_grow(s, (size_t)nt);
    px = r == ST_OK ? malloc(bytes) : NULL;
    if (!px) {
        return ST_ERR_NOMEM;
    }
    memcpy(px, im->pixels, bytes);
    s->img[s->n_img] = (st_engine_image_t){s->n, im->width, im->height, im->channels, px};
    st_hash_image(px, im->width, im->height, im->channels, &s->items[s->n_img].content);
    s->items[s->n_img].start = s->n;
    s->items[s->n_img].n_tokens = nt;
    s->n_img++;
    for (uint64_t i = 0; i < nt; i++) {
        s->tok[s->n++] = st_model_image_token(s->model);
    }
    return ST_OK;
}

/*
 * The hash of the conversation's last full block into *head; *blocks_p is
 * the number of full blocks (0: no head).
 */
static st_status_t en_sess_head(const st_engine_session_t *s, const uint32_t *tok, size_t n,
                                st_hash_t *head, size_t *blocks_p)
{
    size_t B = st_model_config(s->model)->block_tokens, nb = n / B, got = 0;
    st_hash_t *chain;
    st_status_t r;

    *blocks_p = 0;
    if (nb == 0) {
        return ST_OK;
    }
    chain = malloc(sizeof(*chain) * nb);
    if (!chain) {
        return ST_ERR_NOMEM;
    }
    r = st_client_hash(s->client, tok, nb * B, s->items, s->n_img, chain, nb, &got);
    if (r != ST_OK || got != nb) {
        lg_error("session hashing failed id=%s tokens=%zu status=%s", s->id, nb * B,
                 st_status_name(r));
        free(chain);
        return r != ST_OK ? r : ST_ERR_INTERNAL;
    }
    *head = chain[nb - 1];
    *blocks_p = nb;
    free(chain);
    return ST_OK;
}

st_status_t st_engine_session_generate(st_engine_session_t *s, uint32_t n_decode, uint32_t *out_ids,
                                       float *logits, st_engine_stats_t *stats)
{
    size_t B, nb;
    st_hash_t head;
    st_write_result_t wr;
    st_status_t r;

    if (!s) {
        lg_error("st_engine_session_generate refused: NULL session");
        return ST_ERR_INVALID;
    }
    if (s->n == 0) {
        lg_error("st_engine_session_generate refused: empty conversation, append a turn first "
                 "id=%s",
                 s->id);
        return ST_ERR_INVALID;
    }
    r = en_sess_grow(s, n_decode);
    if (r != ST_OK) {
        return r;
    }
    /* The reply lands right after the conversation, where it belongs. */
    r = st_engine_run_images(s->engine, s->tok, s->n, s->img, s->n_img, n_decode, logits,
                             s->tok + s->n, stats);
    if (r != ST_OK) {
        lg_error("session turn failed id=%s tokens=%zu status=%s", s->id, s->n, st_status_name(r));
        return r;
    }
    if (out_ids && n_decode > 0) {
        memcpy(out_ids, s->tok + s->n, sizeof(*out_ids) * n_decode);
    }
    s->n += n_decode;
    B = st_model_config(s->model)->block_tokens;
    r = en_sess_head(s, s->tok, s->n, &head, &nb);
    if (r != ST_OK || nb == 0 ||
        (s->info.length == nb * B && !memcmp(&s->info.head, &head, sizeof(head)))) {
        return r;
    }
    if (stats != NULL && s->partial) {
        stats->partial_writes++;
        s->partial = 0;
    }
    r = st_session_append_ex(s->client, s->id, &head, nb * B,
                             en_engine_durable(s->engine) ? ST_SESSION_DURABLE : 0, &wr);
    if (r == ST_ERR_PARTIAL) {
        /* Stored on fewer disks than write_quorum: logged, counted, the turn goes on. */
        lg_warn_ratelimited("session record short of write_quorum id=%s length=%zu written=%u "
                            "replicas=%u write_quorum=%u",
                            s->id, nb * B, wr.written, wr.replicas, wr.quorum);
        if (stats != NULL) {
            stats->partial_writes++;
        }
        r = ST_OK;
    }
    if (r != ST_OK) {
        lg_error("session record not updated id=%s length=%zu status=%s error=\"%s\"", s->id,
                 nb * B, st_status_name(r), st_client_last_error());
        return r;
    }
    s->info.head = head;
    s->info.length = nb * B;
    s->info.updated_ms = lg_now_ms();
    return ST_OK;
}

size_t st_engine_session_length(const st_engine_session_t *s)
{
    return s ? s->n : 0;
}

const uint32_t *st_engine_session_tokens(const st_engine_session_t *s)
{
    return s && s->n ? s->tok : NULL;
}

const st_session_info_t *st_engine_session_info(const st_engine_session_t *s)
{
    return s ? &s->info : NULL;
}

st_status_t st_engine_session_restore(st_engine_session_t *s, const uint32_t *tokens, size_t n)
{
    size_t B, nb;
    st_hash_t head;
    st_status_t r;

    if (!s) {
        lg_error("st_engine_session_restore refused: NULL session");
        return ST_ERR_INVALID;
    }
    r = en_sess_check(s, tokens, n, "st_engine_session_restore");
    if (r != ST_OK) {
        return r;
    }
    if (s->n > 0) {
        lg_error("st_engine_session_restore refused: the conversation is not empty id=%s "
                 "tokens=%zu",
                 s->id, s->n);
        return ST_ERR_INVALID;
    }
    if (n < s->info.length) {
        lg_error("st_engine_session_restore refused: history shorter than the record id=%s "
                 "tokens=%zu record_length=%llu",
                 s->id, n, (unsigned long long)s->info.length);
        return ST_ERR_INVALID;
    }
    B = st_model_config(s->model)->block_tokens;
    if (s->info.length > 0) {
        r = en_sess_head(s, tokens, (size_t)s->info.length, &head, &nb);
        if (r != ST_OK) {
            return r;
        }
        if (nb * B != s->info.length || memcmp(&head, &s->info.head, sizeof(head)) != 0) {
            lg_error("st_engine_session_restore refused: the history does not hash to the "
                     "record's head id=%s record_length=%llu",
                     s->id, (unsigned long long)s->info.length);
            return ST_ERR_CORRUPT;
        }
    }
    r = en_sess_grow(s, n);
    if (r != ST_OK) {
        return r;
    }
    memcpy(s->tok, tokens, sizeof(*tokens) * n);
    s->n = n;
    return ST_OK;
}

st_status_t st_engine_session_close(st_engine_session_t *s)
{
    st_status_t r;

    if (!s) {
        return ST_OK;
    }
    r = st_session_close(s->client, s->id);
    if (r != ST_OK) {
        lg_warn("session close failed id=%s status=%s error=\"%s\"", s->id, st_status_name(r),
                st_client_last_error());
    }
    st_engine_session_free(s);
    return r;
}

void st_engine_session_free(st_engine_session_t *s)
{
    if (s) {
        for (size_t k = 0; k < s->n_img; k++) {
            free((void *)s->img[k].pixels);
        }
        free(s->img);
        free(s->items);
        free(s->tok);
        free(s);
    }
}
