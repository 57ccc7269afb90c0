/*
 * strata/hash.h - the block-hash chain that names cached blocks.
 *
 * Tokens are grouped into blocks of block_tokens tokens; only full blocks are
 * named. For block i (0-based), with h[-1] the 16-byte namespace seed:
 *
 *   h[i] = XXH3_128( h[i-1] || u32 n || u32 token[0..n) || extras )
 *   extras = for each item overlapping block i, in item order:
 *            16-byte content hash || i32 offset of the item's first token
 *            relative to the block's first token (negative when the item began
 *            in an earlier block)
 *
 * Integers are little-endian; a 128-bit hash is stored as its low 64 bits then
 * its high 64 bits, each little-endian. docs/hashing.md is the byte-by-byte
 * specification with test vectors.
 *
 * Thread safety: every function is pure and may be called from any thread.
 */
#ifndef STRATA_HASH_H
#define STRATA_HASH_H

#include <stddef.h>
#include <stdint.h>

#include "strata/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ST_HASH_BYTES               16
#define ST_BLOCK_TOKENS_DEFAULT     64
#define ST_BLOCK_TOKENS_MAX         4096
/* At most this many items may overlap one block. */
#define ST_HASH_ITEMS_PER_BLOCK_MAX 256

/* A 128-bit block hash or content hash, in its canonical byte order. */
typedef struct st_hash {
    uint8_t b[ST_HASH_BYTES];
} st_hash_t;

/*
 * A non-text item (an image, an audio clip) that occupies the token positions
 * [start, start + n_tokens) of the sequence, named by the hash of its content.
 */
typedef struct st_hash_item {
    st_hash_t content;
    uint64_t start;
    uint64_t n_tokens;
} st_hash_item_t;

/*
 * Computes the hash of one block from the previous hash (the namespace seed
 * for block 0). extras_offsets[k] is the offset of item k relative to the
 * block's first token; n_items may be 0 (items and offsets then unused).
 *
 * Returns ST_OK, or ST_ERR_INVALID if n_tokens is 0 or above
 * ST_BLOCK_TOKENS_MAX, or n_items is above ST_HASH_ITEMS_PER_BLOCK_MAX. *out is written only on success.
 */
ST_API st_status_t st_hash_block(const st_hash_t *prev, const uint32_t *tokens, uint32_t n_tokens,
                                 const st_hash_t *item_hashes, const int32_t *item_offsets,
                                 size_t n_items, st_hash_t *out);

/*
 * Hashes a token sequence into its chain: one hash per full block, in order.
 *
 * @param[in]  seed          namespace seed (h[-1]), 16 bytes.
 * @param[in]  tokens        n_tokens token ids.
 * @param[in]  block_tokens  tokens per block: a multiple of 16, 16..4096.
 * @param[in]  items         non-text items, sorted by start (ties keep their
 *                           order), each with n_tokens > 0; may be NULL if
 *                           n_items is 0. Items may extend past the end of the
 *                           tokens; only their overlap with full blocks counts.
 * @param[out] chain         room for max_blocks hashes.
 * @param[out] n_blocks_p    number of hashes written: min(n_tokens /
 *                           block_tokens, max_blocks).
 *
 * Returns ST_OK; ST_ERR_INVALID for a bad block size, unsorted or empty
 * items, an item offset that does not fit in 32 bits, or more than
 * ST_HASH_ITEMS_PER_BLOCK_MAX items overlapping one block. On error nothing is
 * promised about chain and *n_blocks_p is not written. Does not allocate.
 */
ST_API st_status_t st_hash_chain(const st_hash_t *seed, const uint32_t *tokens, size_t n_tokens,
                                 uint32_t block_tokens, const st_hash_item_t *items, size_t n_items,
                                 st_hash_t *chain, size_t max_blocks, size_t *n_blocks_p);

/* Images for st_hash_image(): 8-bit samples, interleaved, rows top to bottom. */
#define ST_IMAGE_SIDE_MAX     16384       /* the largest width or height */
#define ST_IMAGE_HASH_MAGIC   0x4d495453u /* "STIM" little-endian */
#define ST_IMAGE_HASH_VERSION 1u
#define ST_IMAGE_FORMAT_U8    1u /* one byte per sample, channels interleaved */

/*
 * Names an image by its content: the XXH3-128 of a 24-byte header followed
 * by every pixel (docs/hashing.md, "Images"):
 *
 *   u32 magic "STIM" || u32 version 1 || u32 width || u32 height
 *   || u32 channels || u32 format 1 (8-bit interleaved) || pixels
 *
 * The size is in the hash, so the same bytes read as another shape (a 4x3
 * image against a 6x2 one, grey against colour) give another name. The
 * result is the content hash of the image's item in st_hash_chain() and the
 * key of its VIS object.
 *
 * @param[in]  pixels    width * height * channels bytes, row by row, no
 *                       padding between rows.
 * @param[in]  width     1..ST_IMAGE_SIDE_MAX.
 * @param[in]  height    1..ST_IMAGE_SIDE_MAX.
 * @param[in]  channels  1 (grey) or 3 (RGB).
 * @param[out] out       the image's hash, written only on success.
 *
 * Returns ST_OK, or ST_ERR_INVALID for a NULL pointer, a zero or oversized
 * side, or channels other than 1 or 3. Does not allocate.
 */
ST_API st_status_t st_hash_image(const uint8_t *pixels, uint32_t width, uint32_t height,
                                 uint32_t channels, st_hash_t *out);

/* Writes the 32 lowercase hex digits of h and a NUL into hex (33 bytes). */
ST_API void st_hash_to_hex(const st_hash_t *h, char hex[33]);

/* Parses 32 hex digits. Returns ST_OK or ST_ERR_INVALID (*h untouched). */
ST_API st_status_t st_hash_from_hex(const char *hex, st_hash_t *h);

/* Returns the first 8 bytes of h as a little-endian integer (for tables). */
static inline uint64_t st_hash_lo64(const st_hash_t *h)
{
    uint64_t v = 0;

    for (int i = 7; i >= 0; i--) {
        v = (v << 8) | h->b[i];
    }
    return v;
}

#ifdef __cplusplus
}
#endif
#endif /* STRATA_HASH_H */
