/*
 * image.c - PGM/PPM and PNG images for the tools (image.h).
 *
 * PGM/PPM is parsed here (the Netpbm header: magic, width, height, maxval
 * separated by whitespace and #-comments, one whitespace byte, then the
 * samples); PNG goes through libpng's simplified API (png_image), which
 * does the conversions to 8-bit grey or RGB and reports its errors as text.
 */
#include "image.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <png.h>

#include "strata/hash.h"

static const uint8_t im_png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

static void __attribute__((format(printf, 3, 4)))
im_why(char *why, size_t why_len, const char *fmt, ...)
{
    va_list ap;

    if (why == NULL || why_len == 0) {
        return;
    }
    va_start(ap, fmt);
    vsnprintf(why, why_len, fmt, ap);
    va_end(ap);
}

/* Checks a shape; on success *n_p is its number of samples. */
static st_status_t im_check_shape(uint64_t w, uint64_t h, uint32_t c, size_t *n_p, char *why,
                                  size_t why_len, const char *what)
{
    if (w == 0 || h == 0 || w > ST_IMAGE_SIDE_MAX || h > ST_IMAGE_SIDE_MAX) {
        im_why(why, why_len, "%s: size %llux%llu is out of range (1..%u a side)", what,
               (unsigned long long)w, (unsigned long long)h, ST_IMAGE_SIDE_MAX);
        return ST_ERR_INVALID;
    }
    if (c != 1 && c != 3) {
        im_why(why, why_len, "%s: %u channels (only 1 or 3)", what, c);
        return ST_ERR_INVALID;
    }
    if (w * h * c > IM_SAMPLES_MAX) {
        im_why(why, why_len, "%s: %llux%llux%u is more than %u samples", what,
               (unsigned long long)w, (unsigned long long)h, c, IM_SAMPLES_MAX);
        return ST_ERR_EXHAUSTED;
    }
    *n_p = (size_t)(w * h * c);
    return ST_OK;
}

/* ----------------------------------------------------------- PGM/PPM -- */

/* Skips whitespace and #-comments; returns the new position. */
static size_t im_pnm_skip(const uint8_t *p, size_t len, size_t i)
{
    while (i < len) {
        if (p[i] == '#') {
            while (i < len && p[i] != '\n' && p[i] != '\r') {
                i++;
            }
        } else if (p[i] == ' ' || p[i] == '\t' || p[i] == '\n' || p[i] == '\r' || p[i] == '\v' ||
                   p[i] == '\f') {
            i++;
        } else {
            break;
        }
    }
    return i;
}

/* Reads one header number at *i (after whitespace); -1 when there is none
 * or it passes 10^9. */
static int64_t im_pnm_number(const uint8_t *p, size_t len, size_t *i)
{
    int64_t v = 0;
    size_t j = im_pnm_skip(p, len, *i), start = j;

    while (j < len && p[j] >= '0' && p[j] <= '9') {
        v = v * 10 + (p[j] - '0');
        if (v > 1000000000) {
            return -1;
        }
        j++;
    }
    if (j == start) {
        return -1;
    }
    *i = j;
    return v;
}

static st_status_t im_decode_pnm(const uint8_t *p, size_t len, im_image_t *out, char *why,
                                 size_t why_len)
{
    static const char *const field[3] = {"width", "height", "maxval"};
    uint32_t c = p[1] == '5' ? 1 : 3;
    const char *kind = c == 1 ? "PGM" : "PPM";
    int64_t v[3];
    size_t i = 2, n;
    st_status_t status;
    uint8_t *px;

    for (int f = 0; f < 3; f++) {
        v[f] = im_pnm_number(p, len, &i);
        if (v[f] < 0) {
            im_why(why, why_len, "%s header: %s is missing or not a number below 10^9", kind,
                   field[f]);
            return ST_ERR_INVALID;
        }
    }
    if (v[2] != 255) {
        im_why(why, why_len, "%s header: maxval %lld is not supported (only 255)", kind,
               (long long)v[2]);
        return ST_ERR_INVALID;
    }
    status = im_check_shape((uint64_t)v[0], (uint64_t)v[1], c, &n, why, why_len, kind);
    if (status != ST_OK) {
        return status;
    }
    if (i >= len || !(p[i] == ' ' || p[i] == '\t' || p[i] == '\n' || p[i] == '\r')) {
        im_why(why, why_len, "%s header: no whitespace after maxval", kind);
        return ST_ERR_INVALID;
    }
    i++;
    if (len - i != n) {
        im_why(why, why_len, "%s %lldx%lld: %zu bytes of pixels, want %zu (%s)", kind,
               (long long)v[0], (long long)v[1], len - i, n,
               len - i < n ? "truncated" : "trailing bytes");
        return ST_ERR_INVALID;
    }
    px = malloc(n);
    if (px == NULL) {
        im_why(why, why_len, "%s: no memory for %zu bytes", kind, n);
        return ST_ERR_NOMEM;
    }
    memcpy(px, p + i, n);
    out->width = (uint32_t)v[0];
    out->height = (uint32_t)v[1];
    out->channels = c;
    out->pixels = px;
    return ST_OK;
}

/* --------------------------------------------------------------- PNG -- */

static st_status_t im_decode_png(const uint8_t *p, size_t len, im_image_t *out, char *why,
                                 size_t why_len)
{
    png_image pi;
    uint32_t c;
    size_t n;
    st_status_t status;
    uint8_t *px;

    memset(&pi, 0, sizeof(pi));
    pi.version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_memory(&pi, p, len)) {
        im_why(why, why_len, "PNG: %s", pi.message);
        png_image_free(&pi);
        return ST_ERR_INVALID;
    }
    c = (pi.format & PNG_FORMAT_FLAG_COLOR) ? 3 : 1;
    status = im_check_shape(pi.width, pi.height, c, &n, why, why_len, "PNG");
    if (status != ST_OK) {
        png_image_free(&pi);
        return status;
    }
    pi.format = c == 3 ? PNG_FORMAT_RGB : PNG_FORMAT_GRAY;
    /* Zeroed: with no background given, libpng composites alpha onto the
     * buffer's bytes, so onto black. */
    px = calloc(1, n);
    if (px == NULL) {
        im_why(why, why_len, "PNG: no memory for %zu bytes", n);
        png_image_free(&pi);
        return ST_ERR_NOMEM;
    }
    if (!png_image_finish_read(&pi, NULL, px, 0, NULL)) {
        im_why(why, why_len, "PNG %ux%u: %s", pi.width, pi.height, pi.message);
        png_image_free(&pi);
        free(px);
        return ST_ERR_INVALID;
    }
    out->width = pi.width;
    out->height = pi.height;
    out->channels = c;
    out->pixels = px;
    png_image_free(&pi);
    return ST_OK;
}

st_status_t im_decode(const uint8_t *buf, size_t len, im_image_t *out, char *why, size_t why_len)
{
    im_image_t img = {0};
    st_status_t status;

    im_why(why, why_len, "ok");
    if (len >= 2 && buf[0] == 'P' && (buf[1] == '5' || buf[1] == '6')) {
        status = im_decode_pnm(buf, len, &img, why, why_len);
    } else if (len >= sizeof(im_png_sig) && memcmp(buf, im_png_sig, sizeof(im_png_sig)) == 0) {
        status = im_decode_png(buf, len, &img, why, why_len);
    } else {
        im_why(why, why_len, "not a binary PGM/PPM (P5/P6) or PNG file (%zu bytes)", len);
        return ST_ERR_INVALID;
    }
    if (status == ST_OK) {
        *out = img;
    }
    return status;
}

/* Reads a whole file into malloc'd memory. */
static st_status_t im_read_file(const char *path, uint8_t **buf_p, size_t *len_p, char *why,
                                size_t why_len)
{
    FILE *f = fopen(path, "rb");
    uint8_t *buf;
    long size;

    if (f == NULL) {
        im_why(why, why_len, "%s: %s", path, strerror(errno));
        return ST_ERR_IO;
    }
    if (fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        im_why(why, why_len, "%s: cannot find its size: %s", path, strerror(errno));
        fclose(f);
        return ST_ERR_IO;
    }
    if ((unsigned long)size > IM_FILE_MAX) {
        im_why(why, why_len, "%s: %ld bytes is larger than %u", path, size, IM_FILE_MAX);
        fclose(f);
        return ST_ERR_EXHAUSTED;
    }
    buf = malloc(size ? (size_t)size : 1);
    if (buf == NULL) {
        im_why(why, why_len, "%s: no memory for %ld bytes", path, size);
        fclose(f);
        return ST_ERR_NOMEM;
    }
    if (fread(buf, 1, (size_t)size, f) != (size_t)size) {
        im_why(why, why_len, "%s: short read", path);
        free(buf);
        fclose(f);
        return ST_ERR_IO;
    }
    fclose(f);
    *buf_p = buf;
    *len_p = (size_t)size;
    return ST_OK;
}

st_status_t im_load(const char *path, im_image_t *out, char *why, size_t why_len)
{
    uint8_t *buf = NULL;
    size_t len = 0;
    char inner[256];
    st_status_t status;

    status = im_read_file(path, &buf, &len, why, why_len);
    if (status != ST_OK) {
        return status;
    }
    status = im_decode(buf, len, out, inner, sizeof(inner));
    free(buf);
    if (status != ST_OK) {
        im_why(why, why_len, "%s: %s", path, inner);
    }
    return status;
}

/* -------------------------------------------------------------- write -- */

static int im_ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), m = strlen(tail);

    return n >= m && strcmp(s + n - m, tail) == 0;
}

static st_status_t im_write_tmp(const char *tmp, const im_image_t *img, int png, char *why,
                                size_t why_len)
{
    FILE *f;
    int ok;

    if (png) {
        png_image pi;

        memset(&pi, 0, sizeof(pi));
        pi.version = PNG_IMAGE_VERSION;
        pi.width = img->width;
        pi.height = img->height;
        pi.format = img->channels == 3 ? PNG_FORMAT_RGB : PNG_FORMAT_GRAY;
        if (!png_image_write_to_file(&pi, tmp, 0, img->pixels, 0, NULL)) {
            im_why(why, why_len, "%s: PNG: %s", tmp, pi.message);
            png_image_free(&pi);
            return ST_ERR_IO;
        }
        png_image_free(&pi);
        return ST_OK;
    }
    f = fopen(tmp, "wb");
    if (f == NULL) {
        im_why(why, why_len, "%s: %s", tmp, strerror(errno));
        return ST_ERR_IO;
    }
    ok = fprintf(f, "P%c\n%u %u\n255\n", img->channels == 1 ? '5' : '6', img->width, img->height) >
         0;
    ok = ok && fwrite(img->pixels, 1, im_bytes(img), f) == im_bytes(img);
    ok = (fclose(f) == 0) && ok;
    if (!ok) {
        im_why(why, why_len, "%s: write failed: %s", tmp, strerror(errno));
        return ST_ERR_IO;
    }
    return ST_OK;
}

st_status_t im_save(const char *path, const im_image_t *img, char *why, size_t why_len)
{
    char tmp[4096];
    size_t n;
    st_status_t status;

    if (img == NULL || img->pixels == NULL ||
        im_check_shape(img->width, img->height, img->channels, &n, why, why_len, path) != ST_OK) {
        return ST_ERR_INVALID;
    }
    if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp)) {
        im_why(why, why_len, "%s: path too long", path);
        return ST_ERR_INVALID;
    }
    status = im_write_tmp(tmp, img, im_ends_with(path, ".png"), why, why_len);
    if (status != ST_OK) {
        remove(tmp);
        return status;
    }
    if (rename(tmp, path) != 0) {
        im_why(why, why_len, "%s: rename: %s", path, strerror(errno));
        remove(tmp);
        return ST_ERR_IO;
    }
    return ST_OK;
}

/* ---------------------------------------------------------- synthetic -- */

static uint64_t im_mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

/* One shape of a synthetic image: a disc (kind 0) or a rectangle. */
typedef struct im_shape {
    int64_t x, y, r;
    int kind;
    uint8_t color[3];
} im_shape_t;

#define IM_SHAPES 6

static void im_make_shapes(uint64_t seed, uint32_t w, uint32_t h, im_shape_t *s)
{
    for (int k = 0; k < IM_SHAPES; k++) {
        uint64_t a = im_mix(seed * 0x9e3779b97f4a7c15ull + (uint64_t)k + 1);
        uint64_t b = im_mix(a);

        s[k].x = (int64_t)(a % w);
        s[k].y = (int64_t)((a >> 32) % h);
        s[k].r = 1 + (int64_t)(b % (1 + (w < h ? w : h) / 4));
        s[k].kind = (int)((b >> 20) & 1);
        s[k].color[0] = (uint8_t)(b >> 24);
        s[k].color[1] = (uint8_t)(b >> 32);
        s[k].color[2] = (uint8_t)(b >> 40);
    }
}

static uint8_t im_pixel(uint64_t seed, const im_shape_t *s, uint32_t w, uint32_t h, uint32_t x,
                        uint32_t y, uint32_t ch)
{
    uint64_t g = im_mix(seed + 17 * ch);
    uint32_t v =
        (uint32_t)(((uint64_t)x * (64 + g % 128)) / w + ((uint64_t)y * (64 + (g >> 8) % 128)) / h);

    for (int k = 0; k < IM_SHAPES; k++) {
        int64_t dx = (int64_t)x - s[k].x, dy = (int64_t)y - s[k].y;
        int inside = s[k].kind == 0
                         ? dx * dx + dy * dy <= s[k].r * s[k].r
                         : (dx < 0 ? -dx : dx) <= s[k].r && (dy < 0 ? -dy : dy) <= s[k].r / 2;

        if (inside) {
            v = s[k].color[ch];
        }
    }
    v += (uint32_t)(im_mix(seed ^ ((uint64_t)y << 40 | (uint64_t)x << 8 | ch)) % 9);
    return (uint8_t)(v > 255 ? 255 : v);
}

st_status_t im_generate(uint64_t seed, uint32_t width, uint32_t height, uint32_t channels,
                        im_image_t *out)
{
    im_shape_t shapes[IM_SHAPES];
    size_t n;
    uint8_t *px;
    st_status_t status;

    status = im_check_shape(width, height, channels, &n, NULL, 0, "image");
    if (status != ST_OK) {
        return status;
    }
    px = malloc(n);
    if (px == NULL) {
        return ST_ERR_NOMEM;
    }
    im_make_shapes(seed, width, height, shapes);
    for (uint32_t y = 0; y < height; y++) {
        for (uint32_t x = 0; x < width; x++) {
            for (uint32_t ch = 0; ch < channels; ch++) {
                px[((size_t)y * width + x) * channels + ch] =
                    im_pixel(seed, shapes, width, height, x, y, ch);
            }
        }
    }
    out->width = width;
    out->height = height;
    out->channels = channels;
    out->pixels = px;
    return ST_OK;
}

void im_free(im_image_t *img)
{
    if (img != NULL) {
        free(img->pixels);
        memset(img, 0, sizeof(*img));
    }
}
