/*
 * vis.c - images in the engine's runs (docs/engine.md, "Images"): checks
 * a run's images and names them by st_hash_image(), finds an image's
 * embeddings in a VIS object or runs the encoder and writes one, and runs
 * the image's tokens through the model.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "en_engine.h"
#include "log.h"

st_status_t en_images_check(const st_engine_t *e, const uint32_t *tokens, size_t n,
                            const st_engine_image_t *images, size_t n_images, st_hash_item_t *items)
{
    uint32_t ph = st_model_image_token(e->m);
    uint64_t prev_end = 0;
    size_t B = e->m->cfg.block_tokens;

    if (n_images > 0 && e->seq->dev) {
        lg_error("images refused: not supported on the CUDA device");
        return ST_ERR_UNSUPPORTED;
    }
    if (n_images > 0 && e->remote) {
        /* An image token's keys reach past its own block; the keys window
         * of near-data scoring is not built for that yet. */
        lg_error("images refused: not supported with remote_scoring (near-data scoring)");
        return ST_ERR_UNSUPPORTED;
    }
    for (size_t k = 0; k < n_images; k++) {
        const st_engine_image_t *im = &images[k];
        uint64_t nt = st_engine_image_tokens(im->width, im->height);
        st_status_t r;

        if (!im->pixels || im->width == 0 || im->height == 0 || im->width > ST_IMAGE_SIDE_MAX ||
            im->height > ST_IMAGE_SIDE_MAX || (im->channels != 1 && im->channels != 3)) {
            lg_error("image refused image=%zu width=%u height=%u channels=%u reason=\"pixels, "
                     "1..%u a side and 1 or 3 channels\"",
                     k, im->width, im->height, im->channels, ST_IMAGE_SIDE_MAX);
            return ST_ERR_INVALID;
        }
        if (nt > ST_ENGINE_IMAGE_TOKENS_MAX) {
            lg_error("image refused image=%zu tokens=%llu max=%u", k, (unsigned long long)nt,
                     ST_ENGINE_IMAGE_TOKENS_MAX);
            return ST_ERR_INVALID;
        }
        if (im->position < prev_end || im->position > n || nt > n - im->position) {
            lg_error("image refused image=%zu position=%llu tokens=%llu prompt=%zu reason=\"%s\"",
                     k, (unsigned long long)im->position, (unsigned long long)nt, n,
                     im->position < prev_end ? "overlaps the image before or not sorted"
                                             : "runs past the prompt's end");
            return ST_ERR_INVALID;
        }
        if (e->ring && (im->position + nt - 1) / B - im->position / B + 1 >= e->ring) {
            /* Its rows must all be in the pool at once (docs/engine.md, "Images"). */
            lg_error("image refused image=%zu blocks=%llu local_blocks=%zu reason=\"an image may "
                     "span at most local_blocks blocks\"",
                     k, (unsigned long long)((im->position + nt - 1) / B - im->position / B + 1),
                     e->ring - 1);
            return ST_ERR_UNSUPPORTED;
        }
        for (uint64_t t = im->position; t < im->position + nt; t++) {
            if (tokens[t] != ph) {
                lg_error("image refused image=%zu position=%llu reason=\"token %u at %llu is not "
                         "the image placeholder %u\"",
                         k, (unsigned long long)im->position, tokens[t], (unsigned long long)t, ph);
                return ST_ERR_INVALID;
            }
        }
        r = st_hash_image(im->pixels, im->width, im->height, im->channels, &items[k].content);
        if (r != ST_OK) {
            return r;
        }
        items[k].start = im->position;
        items[k].n_tokens = nt;
        prev_end = im->position + nt;
    }
    return ST_OK;
}

/* Reads the image's VIS object into emb. 1 on a hit; 0 on a miss or a
 * refused object (logged). */
static int en_vis_get(st_engine_t *e, const st_hash_item_t *it, float *emb,
                      st_engine_stats_t *stats)
{
    size_t len = en_vis_bytes(e->m, it->n_tokens);
    uint8_t *buf = malloc(len);
    st_get_op_t op = {.block = 0, .kind = ST_KIND_VIS, .layer = 0, .dst = buf, .dst_len = len};
    st_handle_t *h = NULL;
    uint64_t t0 = cm_mono_us();
    const char *why = NULL;
    char hex[33];
    st_status_t r;

    if (!buf) {
        return 0;
    }
    r = st_client_get(e->client, &it->content, 1, &op, 1, &h);
    if (r == ST_OK) {
        r = st_handle_wait(h, EN_WAIT_MS);
        st_handle_release(h);
    }
    t0 = cm_mono_us() - t0;
    stats->fetch_us += t0;
    stats->stall_us += t0;
    r = r != ST_OK ? r : op.status;
    if (r == ST_OK) {
        stats->bytes_fetched += op.length;
        r = en_vis_unpack(e->m, &it->content, it->n_tokens, buf, op.length, emb, &why);
    }
    if (r != ST_OK && r != ST_ERR_NOT_FOUND) {
        st_hash_to_hex(&it->content, hex);
        lg_ratelimited(LG_INFO,
                       "VIS object not used, encoding the image image=%s status=%s "
                       "reason=\"%s\"",
                       hex, st_status_name(r), why ? why : st_client_last_error());
    }
    free(buf);
    return r == ST_OK;
}

/* Writes the image's embeddings as its VIS object, in the background. */
static void en_vis_put(st_engine_t *e, const st_hash_item_t *it, const float *emb,
                       st_engine_stats_t *stats)
{
    size_t len = en_vis_bytes(e->m, it->n_tokens);
    en_put_t p = {.block = SIZE_MAX, .n = 1};

    p.ops = calloc(1, sizeof(*p.ops));
    p.buf = malloc(ST_HASH_BYTES + len); /* the one-hash chain, then the object */
    if (!p.ops || !p.buf) {
        free(p.ops);
        free(p.buf);
        stats->write_failures++;
        return;
    }
    memcpy(p.buf, it->content.b, ST_HASH_BYTES);
    en_vis_pack(e->m, &it->content, emb, it->n_tokens, p.buf + ST_HASH_BYTES);
    p.ops[0] = (st_put_op_t){0, ST_KIND_VIS, 0, p.buf + ST_HASH_BYTES, len, 0, 0};
    en_put_start(e, &p, (const st_hash_t *)p.buf, 1, 0, stats);
}

st_status_t en_image_run(st_engine_t *e, const st_engine_image_t *img, const st_hash_item_t *it,
                         size_t from, float *logits, st_engine_stats_t *stats)
{
    size_t d = e->m->cfg.d_model, end = it->start + it->n_tokens;
    float *emb = malloc(sizeof(float) * it->n_tokens * d);
    int cache = e->client && e->vis_cache;
    uint64_t t0;
    st_status_t r = ST_OK;

    if (!emb) {
        return ST_ERR_NOMEM;
    }
    if (cache && en_vis_get(e, it, emb, stats)) {
        stats->vis_hits++;
    } else {
        t0 = cm_mono_us();
        r = en_vis_encode(e->m, img->pixels, img->width, img->height, img->channels, emb);
        t0 = cm_mono_us() - t0;
        stats->encoder_us += t0;
        stats->compute_us += t0;
        stats->vis_misses++;
        if (r == ST_OK && cache) {
            en_vis_put(e, it, emb, stats);
        }
    }
    if (r == ST_OK) {
        t0 = cm_mono_us();
        r = en_seq_forward_span(e->seq, emb + (from - it->start) * d, end - from, end, logits);
        stats->compute_us += cm_mono_us() - t0;
    }
    free(emb);
    return r;
}
