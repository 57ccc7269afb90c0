/*
 * hash.c - the block-hash chain of docs/hashing.md.
 *
 * A block's message is assembled in a stack buffer (prev, count, tokens,
 * extras) and hashed with XXH3-128. For 64- to 240-token blocks the part of
 * XXH3 that does not depend on prev is computed apart from the part that
 * does, so the chain's serial step is a handful of multiplies per block
 * (hash_impl.h); other lengths take XXH3_128bits() whole. st_hash_image()
 * streams a header and the pixels through XXH3-128.
 */
#include "strata/hash.h"

#include "hash_impl.h"
#include "hash_internal.h"

st_status_t st_hash_block(const st_hash_t *prev, const uint32_t *tokens, uint32_t n_tokens,
                          const st_hash_t *item_hashes, const int32_t *item_offsets, size_t n_items,
                          st_hash_t *out)
{
    uint8_t msg[HASH_MSG_MAX];
    size_t len;
    XXH128_hash_t x;

    if (n_tokens == 0 || n_tokens > ST_BLOCK_TOKENS_MAX || n_items > ST_HASH_ITEMS_PER_BLOCK_MAX) {
        return ST_ERR_INVALID;
    }
    memcpy(msg, prev->b, ST_HASH_BYTES);
    cm_put_le32(msg + ST_HASH_BYTES, n_tokens);
    len = ST_HASH_BYTES + 4;
    hash_put_tokens(msg + len, tokens, n_tokens);
    len += (size_t)n_tokens * 4;
    for (size_t k = 0; k < n_items; k++) {
        memcpy(msg + len, item_hashes[k].b, ST_HASH_BYTES);
        cm_put_le32(msg + len + ST_HASH_BYTES, (uint32_t)item_offsets[k]);
        len += HASH_EXTRA_BYTES;
    }
    x = XXH3_128bits(msg, len);
    hash_store(&x, out);
    return ST_OK;
}

st_status_t hash_blocks_base(const st_hash_t *seed, const uint32_t *tokens, uint32_t block_tokens,
                             const st_hash_item_t *items, size_t n_items, st_hash_t *chain,
                             size_t n_blocks)
{
    return hash_blocks_impl(seed, tokens, block_tokens, items, n_items, chain, n_blocks);
}

static st_status_t hash_check_items(const st_hash_item_t *items, size_t n_items)
{
    for (size_t k = 0; k < n_items; k++) {
        if (items[k].n_tokens == 0) {
            return ST_ERR_INVALID;
        }
        if (items[k].start + items[k].n_tokens < items[k].start) {
            return ST_ERR_INVALID; /* wraps */
        }
        if (k > 0 && items[k].start < items[k - 1].start) {
            return ST_ERR_INVALID;
        }
    }
    return ST_OK;
}

st_status_t st_hash_chain(const st_hash_t *seed, const uint32_t *tokens, size_t n_tokens,
                          uint32_t block_tokens, const st_hash_item_t *items, size_t n_items,
                          st_hash_t *chain, size_t max_blocks, size_t *n_blocks_p)
{
    size_t n_blocks;
    st_status_t status;

    if (block_tokens < 16 || block_tokens > ST_BLOCK_TOKENS_MAX || block_tokens % 16 != 0) {
        return ST_ERR_INVALID;
    }
    status = hash_check_items(items, n_items);
    if (status != ST_OK) {
        return status;
    }
    n_blocks = n_tokens / block_tokens;
    if (n_blocks > max_blocks) {
        n_blocks = max_blocks;
    }
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx2")) {
        status = hash_blocks_avx2(seed, tokens, block_tokens, items, n_items, chain, n_blocks);
    } else
#endif
    {
        status = hash_blocks_base(seed, tokens, block_tokens, items, n_items, chain, n_blocks);
    }
    if (status != ST_OK) {
        return status;
    }
    *n_blocks_p = n_blocks;
    return ST_OK;
}

st_status_t st_hash_image(const uint8_t *pixels, uint32_t width, uint32_t height, uint32_t channels,
                          st_hash_t *out)
{
    uint8_t head[24];
    XXH3_state_t xs;
    XXH128_hash_t x;

    if (pixels == NULL || out == NULL || width == 0 || height == 0 || width > ST_IMAGE_SIDE_MAX ||
        height > ST_IMAGE_SIDE_MAX || (channels != 1 && channels != 3)) {
        return ST_ERR_INVALID;
    }
    cm_put_le32(head, ST_IMAGE_HASH_MAGIC);
    cm_put_le32(head + 4, ST_IMAGE_HASH_VERSION);
    cm_put_le32(head + 8, width);
    cm_put_le32(head + 12, height);
    cm_put_le32(head + 16, channels);
    cm_put_le32(head + 20, ST_IMAGE_FORMAT_U8);
    if (XXH3_128bits_reset(&xs) != XXH_OK ||
        XXH3_128bits_update(&xs, head, sizeof(head)) != XXH_OK ||
        XXH3_128bits_update(&xs, pixels, (size_t)width * height * channels) != XXH_OK) {
        return ST_ERR_INTERNAL;
    }
    x = XXH3_128bits_digest(&xs);
    hash_store(&x, out);
    return ST_OK;
}

void hash_split_test(const uint8_t *msg, size_t len, uint64_t out[2])
{
    XXH128_hash_t x = hash_split(msg, len);

    out[0] = x.low64;
    out[1] = x.high64;
}

void st_hash_to_hex(const st_hash_t *h, char hex[33])
{
    static const char digits[] = "0123456789abcdef";

    for (int i = 0; i < ST_HASH_BYTES; i++) {
        hex[2 * i] = digits[h->b[i] >> 4];
        hex[2 * i + 1] = digits[h->b[i] & 15];
    }
    hex[32] = '\0';
}

static int hash_hexval(char c)
{
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    if (c >= 'a' && c <= 'f') {
        return c - 'a' + 10;
    }
    if (c >= 'A' && c <= 'F') {
        return c - 'A' + 10;
    }
    return -1;
}

st_status_t st_hash_from_hex(const char *hex, st_hash_t *h)
{
    st_hash_t tmp;

    for (int i = 0; i < ST_HASH_BYTES; i++) {
        int hi = hash_hexval(hex[2 * i]);
        int lo = hi < 0 ? -1 : hash_hexval(hex[2 * i + 1]);

        if (hi < 0 || lo < 0) {
            return ST_ERR_INVALID;
        }
        tmp.b[i] = (uint8_t)(hi << 4 | lo);
    }
    if (hex[32] != '\0') {
        return ST_ERR_INVALID;
    }
    *h = tmp;
    return ST_OK;
}
