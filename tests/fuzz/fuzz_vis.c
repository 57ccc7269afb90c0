/*
 * fuzz_vis.c - the engine's reader of VIS objects (en_vis_unpack,
 * engine/vision.c), the bytes a cluster hands back under an image's key,
 * held to an independent reading of the layout in docs/engine.md "Images".
 *
 * Inputs: VIS objects packed by en_vis_pack() for random images (1 to 64
 * tokens, random embeddings), as they are, read for another image, another
 * token count or another model; with bit flips, truncations, inserts and
 * appends (fuzz_util.c); header fields set one by one to other values;
 * random bytes of the right length and of any. Each is read from a buffer
 * of exactly its size (the sanitizer build sees any read past it).
 *
 * Oracle: an object is accepted exactly when the reference accepts it (the
 * length, magic, version, patch side, fingerprint, image hash, token count,
 * width and the XXH3-64 of the embeddings all match), and then the
 * embeddings are its payload; a refusal is ST_ERR_CORRUPT with a reason and
 * leaves the caller's embeddings untouched.
 *
 * Bounds: STRATA_FUZZ_ITERS inputs (default 20,000). The seed is printed;
 * STRATA_TEST_SEED replays it.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "en_internal.h"
#include "fuzz_util.h"

#define FV_ITERS  20000
#define FV_CANARY 0x5au

static uint64_t g_seed, g_iter;
static fz_log_t g_log;

static void __attribute__((noreturn, format(printf, 3, 4)))
fv_fail(const uint8_t *buf, size_t len, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    fz_fail_one(g_seed, g_iter, &g_log, "object", buf, len, fmt, ap);
}

/* The layout of docs/engine.md "Images", read on its own. */
static int fv_reference(const st_model_t *m, const st_hash_t *img, size_t n, const uint8_t *p,
                        size_t len)
{
    size_t d = st_model_config(m)->d_model, eb = n * d * 4;

    return len == 48 + eb && fz_get32(p) == 0x53495653u && (fz_get32(p + 4) & 0xffffu) == 1 &&
           (fz_get32(p + 4) >> 16) == 16 && fz_get64(p + 8) == st_model_fingerprint(m) &&
           memcmp(p + 16, img->b, 16) == 0 && fz_get32(p + 32) == n && fz_get32(p + 36) == d &&
           fz_get64(p + 40) == XXH3_64bits(p + 48, eb);
}

static void fv_check(const st_model_t *m, const st_hash_t *img, size_t n, const uint8_t *in,
                     size_t len, int must_accept)
{
    size_t d = st_model_config(m)->d_model, eb = n * d * 4;
    uint8_t *exact = malloc(len ? len : 1), *emb = malloc(eb);
    const char *why = NULL;
    int want = fv_reference(m, img, n, in, len);
    st_status_t r;

    if (!exact || !emb) {
        abort();
    }
    memcpy(exact, in, len);
    memset(emb, FV_CANARY, eb);
    r = en_vis_unpack(m, img, n, exact, len, (float *)emb, &why);
    if ((r == ST_OK) != want) {
        fv_fail(in, len, "en_vis_unpack %s, the reference %s", r == ST_OK ? "accepts" : "refuses",
                want ? "accepts" : "refuses");
    }
    if (must_accept && r != ST_OK) {
        fv_fail(in, len, "an unmutated object was refused (%s)", why ? why : "?");
    }
    if (r == ST_OK && memcmp(emb, in + 48, eb) != 0) {
        fv_fail(in, len, "accepted, but the embeddings are not the payload");
    }
    if (r != ST_OK) {
        if (r != ST_ERR_CORRUPT || why == NULL || why[0] == '\0') {
            fv_fail(in, len, "refused with %s and no reason", st_status_name(r));
        }
        for (size_t i = 0; i < eb; i++) {
            if (emb[i] != FV_CANARY) {
                fv_fail(in, len, "a refused object wrote the embeddings (byte %zu)", i);
            }
        }
    }
    free(exact);
    free(emb);
}

int main(void)
{
    uint64_t iters = fz_env_u64("STRATA_FUZZ_ITERS", FV_ITERS);
    st_model_config_t mc;
    st_model_t *m, *other;
    double start = fz_now();
    fz_rng_t r;

    g_seed = fz_seed("test_fuzz_vis");
    fz_rng_init(&r, g_seed, 1);
    st_model_config_default(&mc);
    if (st_model_create(&mc, &m) != ST_OK) {
        return 1;
    }
    mc.seed = 2;
    if (st_model_create(&mc, &other) != ST_OK) {
        return 1;
    }
    for (g_iter = 0; g_iter < iters; g_iter++) {
        size_t n = 1 + fz_below(&r, 64), d = mc.d_model, len = en_vis_bytes(m, n);
        float *emb = fz_alloc(n * d * sizeof(float));
        uint8_t *obj = fz_alloc(len), *in = obj;
        st_hash_t img, img2;
        size_t n_read = n;
        const st_model_t *reader = m;
        int whole = 0;

        fz_log_clear(&g_log);
        fz_fill(&r, img.b, sizeof(img.b));
        for (size_t i = 0; i < n * d; i++) {
            emb[i] = (float)((int64_t)fz_below(&r, 2001) - 1000) / 250.0f;
        }
        en_vis_pack(fz_chance(&r, 3) ? other : m, &img, emb, n, obj);
        img2 = img;
        switch (fz_below(&r, 6)) {
        case 0: whole = 1; break;
        case 1: in = fz_mutate_bytes(&r, obj, len, &len, &g_log); break;
        case 2: {
            size_t at = fz_below(&r, 48);

            obj[at] ^= (uint8_t)(1u << fz_below(&r, 8));
            fz_logf(&g_log, "header byte %zu flipped", at);
            break;
        }
        case 3:
            n_read = fz_chance(&r, 50) ? n + 1 : (n > 1 ? n - 1 : 2);
            img2.b[fz_below(&r, 16)] ^= fz_chance(&r, 50) ? 1 : 0;
            reader = fz_chance(&r, 20) ? other : m;
            fz_logf(&g_log, "read for %zu tokens", n_read);
            break;
        case 4:
            fz_fill(&r, obj, len);
            fz_logf(&g_log, "%zu random bytes (the right length)", len);
            break;
        default:
            len = fz_below(&r, 200);
            in = fz_alloc(len + 1);
            fz_fill(&r, in, len);
            fz_logf(&g_log, "%zu random bytes", len);
            break;
        }
        fv_check(reader, &img2, n_read, in, len, whole && fv_reference(m, &img, n, obj, len));
        if (g_iter % 256 == 255) {
            fz_arena_reset();
        }
    }
    fz_arena_reset();
    printf("test_fuzz_vis: %llu inputs in %.1f s\n", (unsigned long long)iters, fz_now() - start);
    st_model_free(other);
    st_model_free(m);
    return 0;
}
