/*
 * image.h - image files for the tools (strata-engine, the CLI, tests,
 * benches): binary PGM/PPM (P5/P6, maxval 255) and PNG (through libpng)
 * read into 8-bit interleaved pixels, the form st_hash_image() names; and
 * deterministic synthetic images from a seed.
 *
 * Not libstrata's public API: a connector gives st_hash_image() pixels it
 * decoded itself. Link strata_image (common/CMakeLists.txt).
 *
 * Errors: every reader returns a status and writes a one-line reason into
 * the caller's buffer (what is wrong, and where: "PPM header: maxval 65535
 * is not supported (only 255)"); im_load() and im_save() put the file's
 * name in front. Nothing here logs: the tool that called shows the reason.
 * On error the output image is not touched and nothing is allocated.
 *
 * Thread safety: every function may be called from any thread on its own
 * arguments.
 */
#ifndef STRATA_IMAGE_H
#define STRATA_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include "strata/status.h"

/* The most samples (width * height * channels) a file may decode to. */
#define IM_SAMPLES_MAX (64u << 20)
/* The largest file im_load() reads. */
#define IM_FILE_MAX    (256u << 20)

/* An image: width * height * channels bytes, channels interleaved, rows top
 * to bottom without padding. channels is 1 (grey) or 3 (RGB). */
typedef struct im_image {
    uint32_t width;
    uint32_t height;
    uint32_t channels;
    uint8_t *pixels; /* malloc'd; released by im_free() */
} im_image_t;

/*
 * Decodes a PGM/PPM (P5/P6) or PNG image held in buf[0..len), told apart by
 * their first bytes. PGM gives 1 channel and PPM 3. A PNG in grey (with or
 * without alpha, any bit depth) gives 1 channel, anything else 3: palettes
 * are expanded, 16-bit samples reduced to 8 bits, and alpha is composited
 * onto black (libpng's simplified API).
 *
 * Returns ST_OK; ST_ERR_INVALID for a file that is neither, is truncated or
 * malformed, has trailing bytes after a PGM/PPM's pixels, a maxval other
 * than 255, or a side of 0 or above ST_IMAGE_SIDE_MAX; ST_ERR_EXHAUSTED for
 * more than IM_SAMPLES_MAX samples; ST_ERR_NOMEM. why (why_len bytes, may be
 * 0) gets the reason, always NUL-terminated when why_len > 0.
 */
st_status_t im_decode(const uint8_t *buf, size_t len, im_image_t *out, char *why, size_t why_len);

/* Reads and decodes a file as im_decode() does; why starts with the path.
 * Also ST_ERR_IO (with errno's text) when the file cannot be read, and
 * ST_ERR_EXHAUSTED for one larger than IM_FILE_MAX. */
st_status_t im_load(const char *path, im_image_t *out, char *why, size_t why_len);

/*
 * Writes img to path: PNG when the name ends in ".png", else PGM (1 channel)
 * or PPM (3 channels). The file is written whole to "<path>.tmp" and renamed,
 * so no half-written image is ever seen under path. Returns ST_OK,
 * ST_ERR_INVALID for a bad image, ST_ERR_IO (why has the reason).
 */
st_status_t im_save(const char *path, const im_image_t *img, char *why, size_t why_len);

/*
 * Makes a deterministic synthetic image: the same (seed, width, height,
 * channels) gives the same pixels on every machine (integer arithmetic
 * only): a gradient, a few discs and rectangles placed by the seed, and
 * low noise. Different seeds give different images.
 *
 * Returns ST_OK, ST_ERR_INVALID (a side of 0 or above ST_IMAGE_SIDE_MAX,
 * channels not 1 or 3), ST_ERR_EXHAUSTED (more than IM_SAMPLES_MAX samples)
 * or ST_ERR_NOMEM; *out is written only on success.
 */
st_status_t im_generate(uint64_t seed, uint32_t width, uint32_t height, uint32_t channels,
                        im_image_t *out);

/* Releases img's pixels and zeroes it. NULL and a zeroed image are fine. */
void im_free(im_image_t *img);

/* Returns width * height * channels. */
static inline size_t im_bytes(const im_image_t *img)
{
    return (size_t)img->width * img->height * img->channels;
}

#endif /* STRATA_IMAGE_H */
