/*
 * fuzz_image.c - the image readers of common/image.c (binary PGM/PPM and
 * PNG through libpng), held to an independent reading of the Netpbm header
 * and to invariants for PNG.
 *
 * Inputs: random bytes of 0 to 3,000 bytes (half of them starting "P5",
 * "P6" or the PNG signature); well-formed PGM/PPM files (random sizes,
 * comments and whitespace between the fields, maxval 255 or not) and PNG
 * files (grey, grey+alpha, RGB, RGBA, colour-mapped; written by libpng)
 * of im_generate() images; those files with bit flips, truncations,
 * inserts and appends (fuzz_util.c); every prefix of some of them. Each
 * input is decoded from a buffer of exactly its size (the sanitizer build
 * sees any read past it).
 *
 * Oracle: a PGM/PPM is accepted exactly when the reference accepts it, with
 * the same size, channels and pixels. Any accepted image has a side of
 * 1..ST_IMAGE_SIDE_MAX, 1 or 3 channels, at most IM_SAMPLES_MAX samples and
 * pixels that can be read whole; an unmutated file gives back the image it
 * was written from (PNG with alpha: composited onto black). A refusal is
 * ST_ERR_INVALID or ST_ERR_EXHAUSTED, leaves the output untouched and has a
 * non-empty reason that fits its buffer.
 *
 * Bounds: STRATA_FUZZ_ITERS inputs (default 30,000). The seed is printed;
 * STRATA_TEST_SEED replays it. A failure prints the input's iteration,
 * mutations and bytes.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <png.h>

#include "fuzz_util.h"
#include "image.h"
#include "strata/hash.h"

#define FI_ITERS  30000
#define FI_MAXLEN 3000

static uint64_t g_seed, g_iter;
static fz_log_t g_log;

static void __attribute__((noreturn, format(printf, 3, 4)))
fi_fail(const uint8_t *buf, size_t len, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    fz_fail_one(g_seed, g_iter, &g_log, "input", buf, len, fmt, ap);
}

/* What the reference reads from a PGM/PPM. */
typedef struct fi_ref {
    int ok;
    uint64_t w, h, c;
    size_t off;
} fi_ref_t;

static int fi_space(uint8_t b)
{
    return b == ' ' || b == '\t' || b == '\n' || b == '\r' || b == '\v' || b == '\f';
}

/* The Netpbm header read on its own: "P5"/"P6", then three decimal fields,
 * each after whitespace or comments, then one whitespace byte. */
static fi_ref_t fi_reference(const uint8_t *p, size_t len)
{
    fi_ref_t r = {0};
    uint64_t v[3];
    size_t i = 2;

    if (len < 2 || p[0] != 'P' || (p[1] != '5' && p[1] != '6')) {
        return r;
    }
    for (int f = 0; f < 3; f++) {
        size_t digits = 0;

        for (;;) {
            if (i < len && fi_space(p[i])) {
                i++;
            } else if (i < len && p[i] == '#') {
                while (i < len && p[i] != '\n' && p[i] != '\r') {
                    i++;
                }
            } else {
                break;
            }
        }
        v[f] = 0;
        while (i < len && p[i] >= '0' && p[i] <= '9' && v[f] <= 1000000000) {
            v[f] = v[f] * 10 + (uint64_t)(p[i++] - '0');
            digits++;
        }
        if (digits == 0 || v[f] > 1000000000) {
            return r;
        }
    }
    if (v[2] != 255 || v[0] == 0 || v[1] == 0 || v[0] > ST_IMAGE_SIDE_MAX ||
        v[1] > ST_IMAGE_SIDE_MAX) {
        return r;
    }
    r.c = p[1] == '5' ? 1 : 3;
    if (v[0] * v[1] * r.c > IM_SAMPLES_MAX) {
        return r;
    }
    if (i >= len || !(p[i] == ' ' || p[i] == '\t' || p[i] == '\n' || p[i] == '\r')) {
        return r;
    }
    i++;
    if (len - i != v[0] * v[1] * r.c) {
        return r;
    }
    r.ok = 1, r.w = v[0], r.h = v[1], r.off = i;
    return r;
}

/* The file an input came from, when it is unmutated. */
typedef struct fi_src {
    int whole;       /* the input is the file as written */
    im_image_t img;  /* the pixels it must give back */
    uint8_t *expect; /* arena; what an RGBA/GA source composites to */
} fi_src_t;

/* Decodes in[0..len) from a buffer of exactly len bytes and checks it. */
static int fi_check(const uint8_t *in, size_t len, const fi_src_t *src)
{
    uint8_t *exact = malloc(len ? len : 1);
    im_image_t out = {11, 12, 13, NULL};
    char why[97];
    fi_ref_t ref = fi_reference(in, len);
    int pnm = len >= 2 && in[0] == 'P' && (in[1] == '5' || in[1] == '6');
    st_status_t status;

    if (exact == NULL) {
        abort();
    }
    memcpy(exact, in, len);
    memset(why, 0x5a, sizeof(why));
    status = im_decode(exact, len, &out, why, sizeof(why) - 1);
    if (why[sizeof(why) - 1] != 0x5a || memchr(why, 0, sizeof(why) - 1) == NULL) {
        fi_fail(in, len, "the reason is not NUL-terminated inside its buffer");
    }
    if (status != ST_OK) {
        if (status != ST_ERR_INVALID && status != ST_ERR_EXHAUSTED) {
            fi_fail(in, len, "refused with %s (%s)", st_status_name(status), why);
        }
        if (out.width != 11 || out.height != 12 || out.channels != 13 || out.pixels != NULL) {
            fi_fail(in, len, "a refusal wrote the output image");
        }
        if (why[0] == '\0') {
            fi_fail(in, len, "a refusal without a reason");
        }
        if (pnm && ref.ok) {
            fi_fail(in, len, "PGM/PPM refused (%s) but the reference reads it", why);
        }
        if (src != NULL && src->whole) {
            fi_fail(in, len, "an unmutated file was refused: %s", why);
        }
        free(exact);
        return 0;
    }
    if (out.width == 0 || out.height == 0 || out.width > ST_IMAGE_SIDE_MAX ||
        out.height > ST_IMAGE_SIDE_MAX || (out.channels != 1 && out.channels != 3) ||
        im_bytes(&out) > IM_SAMPLES_MAX || out.pixels == NULL) {
        fi_fail(in, len, "accepted a bad shape %ux%ux%u", out.width, out.height, out.channels);
    }
    {
        volatile uint8_t sum = 0;

        for (size_t k = 0; k < im_bytes(&out); k++) {
            sum ^= out.pixels[k]; /* every byte readable (sanitizer) */
        }
        (void)sum;
    }
    if (pnm) {
        if (!ref.ok) {
            fi_fail(in, len, "PGM/PPM accepted but the reference refuses it");
        }
        if (out.width != ref.w || out.height != ref.h || out.channels != ref.c ||
            memcmp(out.pixels, in + ref.off, im_bytes(&out)) != 0) {
            fi_fail(in, len, "PGM/PPM read differently from the reference");
        }
    }
    if (src != NULL && src->whole) {
        const uint8_t *want = src->expect ? src->expect : src->img.pixels;

        if (out.width != src->img.width || out.height != src->img.height ||
            out.channels != src->img.channels || memcmp(out.pixels, want, im_bytes(&out)) != 0) {
            fi_fail(in, len, "an unmutated file did not give back its image");
        }
    }
    im_free(&out);
    free(exact);
    return 1;
}

/* A well-formed PGM/PPM of a generated image, with random header spacing
 * and comments (and, now and then, another maxval). */
static uint8_t *fi_pnm(fz_rng_t *r, fi_src_t *src, size_t *len_p)
{
    uint32_t w = 1 + (uint32_t)fz_below(r, 40), h = 1 + (uint32_t)fz_below(r, 30);
    uint32_t c = fz_chance(r, 50) ? 1 : 3;
    char head[256];
    int n = 0;
    static const char *const gaps[] = {" ", "\n", "  \t", "\n# a comment\n", "\r\n", " #x\n "};
    uint8_t *buf;
    int maxval = fz_chance(r, 90) ? 255 : (int)fz_below(r, 70000);

    if (im_generate(fz_next(r), w, h, c, &src->img) != ST_OK) {
        abort();
    }
    n += snprintf(head + n, sizeof(head) - (size_t)n, "P%c", c == 1 ? '5' : '6');
    n += snprintf(head + n, sizeof(head) - (size_t)n, "%s%u", gaps[fz_below(r, 6)], w);
    n += snprintf(head + n, sizeof(head) - (size_t)n, "%s%u", gaps[fz_below(r, 6)], h);
    n += snprintf(head + n, sizeof(head) - (size_t)n, "%s%d%c", gaps[fz_below(r, 6)], maxval,
                  "\n \t\r"[fz_below(r, 4)]);
    buf = fz_alloc((size_t)n + im_bytes(&src->img));
    memcpy(buf, head, (size_t)n);
    memcpy(buf + n, src->img.pixels, im_bytes(&src->img));
    *len_p = (size_t)n + im_bytes(&src->img);
    src->whole = maxval == 255;
    fz_logf(&g_log, "PNM %ux%ux%u maxval %d", w, h, c, maxval);
    return buf;
}

/* A PNG of a generated image in one of libpng's formats; sets what an
 * unmutated read must give. */
static uint8_t *fi_png(fz_rng_t *r, fi_src_t *src, size_t *len_p)
{
    static const uint32_t formats[] = {PNG_FORMAT_GRAY, PNG_FORMAT_GA, PNG_FORMAT_RGB,
                                       PNG_FORMAT_RGBA};
    uint32_t w = 1 + (uint32_t)fz_below(r, 40), h = 1 + (uint32_t)fz_below(r, 30);
    uint32_t fmt = formats[fz_below(r, 4)];
    uint32_t c = (fmt & PNG_FORMAT_FLAG_COLOR) ? 3 : 1, a = (fmt & PNG_FORMAT_FLAG_ALPHA) ? 1 : 0;
    png_image pi;
    png_alloc_size_t size = 0;
    uint8_t *raw, *buf;

    if (im_generate(fz_next(r), w, h, c, &src->img) != ST_OK) {
        abort();
    }
    if (a) { /* add an alpha sample after each pixel */
        raw = fz_alloc((size_t)w * h * (c + 1));
        src->expect = fz_alloc(im_bytes(&src->img));
        for (size_t k = 0; k < (size_t)w * h; k++) {
            /* Opaque or transparent only: the compositing is then exact. */
            uint8_t alpha = fz_chance(r, 70) ? 255 : 0;

            for (uint32_t ch = 0; ch < c; ch++) {
                raw[k * (c + 1) + ch] = src->img.pixels[k * c + ch];
                src->expect[k * c + ch] = alpha ? src->img.pixels[k * c + ch] : 0;
            }
            raw[k * (c + 1) + c] = alpha;
        }
    } else {
        raw = src->img.pixels;
    }
    memset(&pi, 0, sizeof(pi));
    pi.version = PNG_IMAGE_VERSION, pi.width = w, pi.height = h, pi.format = fmt;
    if (!png_image_write_get_memory_size(pi, size, 0, raw, 0, NULL)) {
        abort();
    }
    buf = fz_alloc(size);
    if (!png_image_write_to_memory(&pi, buf, &size, 0, raw, 0, NULL)) {
        abort();
    }
    *len_p = size;
    src->whole = 1;
    fz_logf(&g_log, "PNG %ux%u format %u", w, h, fmt);
    return buf;
}

static uint8_t *fi_random(fz_rng_t *r, size_t *len_p)
{
    static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    size_t len = fz_below(r, FI_MAXLEN + 1);
    uint8_t *in = fz_alloc(len + 1);

    fz_fill(r, in, len);
    if (len >= 8 && fz_chance(r, 50)) {
        switch (fz_below(r, 3)) {
        case 0: memcpy(in, "P5", 2); break;
        case 1: memcpy(in, "P6 ", 3); break;
        default: memcpy(in, sig, 8); break;
        }
    }
    fz_logf(&g_log, "%zu random bytes", len);
    *len_p = len;
    return in;
}

int main(void)
{
    uint64_t iters = fz_env_u64("STRATA_FUZZ_ITERS", FI_ITERS), accepted = 0, prefixes = 0;
    double start = fz_now();
    fz_rng_t r;

    g_seed = fz_seed("test_fuzz_image");
    fz_rng_init(&r, g_seed, 1);
    for (g_iter = 0; g_iter < iters; g_iter++) {
        fi_src_t src = {0};
        uint64_t pick = fz_below(&r, 6);
        size_t len;
        uint8_t *in;

        fz_log_clear(&g_log);
        if (pick == 0) {
            in = fi_random(&r, &len);
            accepted += (uint64_t)fi_check(in, len, NULL);
        } else {
            in = (pick % 2) ? fi_pnm(&r, &src, &len) : fi_png(&r, &src, &len);
            if (pick >= 3) {
                in = fz_mutate_bytes(&r, in, len, &len, &g_log);
                src.whole = 0;
            } else if (pick == 2 && fz_chance(&r, 3)) {
                for (size_t k = 0; k < len; k++) {
                    fi_check(in, k, NULL);
                }
                prefixes++;
            }
            accepted += (uint64_t)fi_check(in, len, &src);
            im_free(&src.img);
        }
        if (g_iter % 256 == 255) {
            fz_arena_reset();
        }
    }
    fz_arena_reset();
    printf("test_fuzz_image: %llu inputs in %.1f s (%llu accepted, %llu with every prefix)\n",
           (unsigned long long)iters, fz_now() - start, (unsigned long long)accepted,
           (unsigned long long)prefixes);
    return 0;
}
