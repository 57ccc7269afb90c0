/*
 * vision.c - the reference model's vision path (docs/engine.md, "Images"):
 * a deterministic synthetic encoder, its one fused pre-processing pass,
 * the projection into d_model, and the VIS object that caches the result.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "bytes.h"
#include "en_internal.h"
#include "log.h"

/* Per-channel mean and spread of the normalisation (the usual RGB values). */
static const float en_vis_mean[3] = {0.485f, 0.456f, 0.406f};
static const float en_vis_std[3] = {0.229f, 0.224f, 0.225f};

uint64_t st_engine_image_tokens(uint32_t width, uint32_t height)
{
    uint64_t pw = ((uint64_t)width + EN_VIS_PATCH - 1) / EN_VIS_PATCH;
    uint64_t ph = ((uint64_t)height + EN_VIS_PATCH - 1) / EN_VIS_PATCH;

    return pw * ph;
}

/* The positional encoding of sample i of the patch at (row, col): sines of
 * the patch row on even samples, cosines of the column on odd ones. */
static float en_vis_pe(uint32_t row, uint32_t col, int i)
{
    double f = pow(10000.0, -(double)(i & ~1) / (double)EN_VIS_IN);

    return 0.1f * (float)((i & 1) ? cos((double)col * f) : sin((double)row * f));
}

/*
 * The fused pre-processing: one pass over the pixels that tiles them into
 * patches (patch p = row-major over the patch grid; inside it, samples
 * (dy, dx, channel) row-major), normalises each sample ((v / 255 - mean) /
 * std, a grey sample feeding all three channels), and adds the patch's
 * positional encoding. Samples past the image's edge are 0 before the
 * encoding is added. out: tokens x EN_VIS_IN.
 */
static void en_vis_preprocess(const uint8_t *px, uint32_t w, uint32_t h, uint32_t c, float *out)
{
    uint32_t pw = (w + EN_VIS_PATCH - 1) / EN_VIS_PATCH, ph = (h + EN_VIS_PATCH - 1) / EN_VIS_PATCH;
    float pe[EN_VIS_IN];

    for (uint32_t py = 0; py < ph; py++) {
        for (uint32_t pxi = 0; pxi < pw; pxi++) {
            float *p = out + ((size_t)py * pw + pxi) * EN_VIS_IN;

            for (int i = 0; i < EN_VIS_IN; i++) {
                pe[i] = en_vis_pe(py, pxi, i);
            }
            for (uint32_t dy = 0; dy < EN_VIS_PATCH; dy++) {
                uint32_t y = py * EN_VIS_PATCH + dy;

                for (uint32_t dx = 0; dx < EN_VIS_PATCH; dx++) {
                    uint32_t x = pxi * EN_VIS_PATCH + dx;
                    const uint8_t *s = px + ((size_t)y * w + x) * c;
                    int i = (int)(dy * EN_VIS_PATCH + dx) * 3;

                    for (int ch = 0; ch < 3; ch++) {
                        float v = 0.0f;

                        if (x < w && y < h) {
                            v = ((float)s[c == 3 ? ch : 0] * (1.0f / 255.0f) - en_vis_mean[ch]) /
                                en_vis_std[ch];
                        }
                        p[i + ch] = v + pe[i + ch];
                    }
                }
            }
        }
    }
}

static void en_vis_gelu(float *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        v[i] = 0.5f * v[i] * (1.0f + erff(v[i] * 0.70710678f));
    }
}

st_status_t en_vis_encode(const st_model_t *m, const uint8_t *px, uint32_t w, uint32_t h,
                          uint32_t c, float *out)
{
    size_t n = st_engine_image_tokens(w, h), hid = EN_VIS_HIDDEN(m), d = m->cfg.d_model;
    float *patches = malloc(sizeof(float) * (n * EN_VIS_IN + (2 + EN_VIS_WIDE) * hid));
    float *hbuf, *wide, *back;

    if (!patches) {
        lg_error("no memory to encode an image tokens=%zu", n);
        return ST_ERR_NOMEM;
    }
    hbuf = patches + n * EN_VIS_IN;
    wide = hbuf + hid;
    back = wide + EN_VIS_WIDE * hid;
    en_vis_preprocess(px, w, h, c, patches);
    for (size_t t = 0; t < n; t++) {
        en_matvec(m->vis_w1, patches + t * EN_VIS_IN, EN_VIS_IN, (int)hid, hbuf);
        en_vis_gelu(hbuf, hid);
        /* Residual MLP blocks: h += down(gelu(up(h))). */
        for (int k = 0; k < EN_VIS_DEPTH; k++) {
            en_matvec(m->vis_up[k], hbuf, (int)hid, (int)(EN_VIS_WIDE * hid), wide);
            en_vis_gelu(wide, EN_VIS_WIDE * hid);
            en_matvec(m->vis_down[k], wide, (int)(EN_VIS_WIDE * hid), (int)hid, back);
            for (size_t i = 0; i < hid; i++) {
                hbuf[i] += back[i];
            }
        }
        en_matvec(m->vis_w2, hbuf, (int)hid, (int)d, out + t * d);
    }
    free(patches);
    return ST_OK;
}

/* ------------------------------------------------------------ VIS -- */

/*
 * A VIS object: a 48-byte header, then the embeddings (tokens x d_model
 * fp32). Header: u32 magic "SVIS", u16 version 1, u16 patch side, u64 model
 * fingerprint, 16-byte image hash, u32 tokens, u32 d_model, u64 XXH3-64 of
 * the embeddings' bytes.
 */
size_t en_vis_bytes(const st_model_t *m, size_t n)
{
    return EN_VIS_HEADER + n * m->cfg.d_model * sizeof(float);
}

void en_vis_pack(const st_model_t *m, const st_hash_t *image, const float *emb, size_t n, void *dst)
{
    uint8_t *p = dst;
    size_t eb = n * m->cfg.d_model * sizeof(float);

    cm_put_le32(p, EN_VIS_MAGIC);
    cm_put_le16(p + 4, EN_VIS_VERSION);
    cm_put_le16(p + 6, EN_VIS_PATCH);
    cm_put_le64(p + 8, m->fingerprint);
    memcpy(p + 16, image->b, ST_HASH_BYTES);
    cm_put_le32(p + 32, (uint32_t)n);
    cm_put_le32(p + 36, m->cfg.d_model);
    cm_put_le64(p + 40, XXH3_64bits(emb, eb));
    memcpy(p + EN_VIS_HEADER, emb, eb);
}

st_status_t en_vis_unpack(const st_model_t *m, const st_hash_t *image, size_t n, const void *src,
                          size_t len, float *emb, const char **why)
{
    const uint8_t *p = src;
    size_t eb = n * m->cfg.d_model * sizeof(float);

    *why = NULL;
    if (len != en_vis_bytes(m, n)) {
        *why = "length";
    } else if (cm_get_le32(p) != EN_VIS_MAGIC || cm_get_le(p + 4, 2) != EN_VIS_VERSION ||
               cm_get_le(p + 6, 2) != EN_VIS_PATCH) {
        *why = "magic or version";
    } else if (cm_get_le64(p + 8) != m->fingerprint) {
        *why = "model fingerprint";
    } else if (memcmp(p + 16, image->b, ST_HASH_BYTES) != 0) {
        *why = "image hash";
    } else if (cm_get_le32(p + 32) != n || cm_get_le32(p + 36) != m->cfg.d_model) {
        *why = "token count or width";
    } else if (cm_get_le64(p + 40) != XXH3_64bits(p + EN_VIS_HEADER, eb)) {
        *why = "embeddings checksum";
    }
    if (*why) {
        return ST_ERR_CORRUPT;
    }
    memcpy(emb, p + EN_VIS_HEADER, eb);
    return ST_OK;
}
