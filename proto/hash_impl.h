/*
 * hash_impl.h - the block loop of st_hash_chain(), compiled once per
 * instruction set: hash.c includes it for the baseline (SSE2) and
 * hash_avx2.c with -mavx2, and st_hash_chain() picks one at run time.
 * XXH_INLINE_ALL makes every xxHash function static to the including file,
 * so each copy uses the vector code its own flags allow.
 */
#ifndef STRATA_HASH_IMPL_H
#define STRATA_HASH_IMPL_H

#include <string.h>

#include "strata/hash.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#define ST_HASH_EXTRA_BYTES (ST_HASH_BYTES + 4)
#define ST_HASH_MSG_MAX                            \
    (ST_HASH_BYTES + 4 + 4 * ST_BLOCK_TOKENS_MAX + \
     ST_HASH_EXTRA_BYTES * ST_HASH_ITEMS_PER_BLOCK_MAX)

static inline void st_hash_put_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static inline void st_hash_put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) {
        p[i] = (uint8_t)(v >> (8 * i));
    }
}

static inline void st_hash_store(const XXH128_hash_t *x, st_hash_t *out)
{
    st_hash_put_u64(out->b, x->low64);
    st_hash_put_u64(out->b + 8, x->high64);
}

/* Writes n tokens little-endian; a plain copy on little-endian hosts. */
static inline void st_hash_put_tokens(uint8_t *p, const uint32_t *tokens, uint32_t n)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    memcpy(p, tokens, (size_t)n * 4);
#else
    for (uint32_t i = 0; i < n; i++) {
        st_hash_put_u32(p + 4 * i, tokens[i]);
    }
#endif
}

/*
 * Hashes n_blocks full blocks; items were checked by the caller.
 * Returns ST_OK, or ST_ERR_INVALID when an item offset does not fit in 32 bits
 * or too many items overlap one block.
 */
static inline st_status_t st_hash_blocks_impl(const st_hash_t *seed, const uint32_t *tokens,
                                              uint32_t block_tokens, const st_hash_item_t *items,
                                              size_t n_items, st_hash_t *chain, size_t n_blocks)
{
    uint8_t msg[ST_HASH_MSG_MAX];
    size_t first_item = 0;
    const uint8_t *prev = seed->b;

    for (size_t i = 0; i < n_blocks; i++) {
        uint64_t bstart = (uint64_t)i * block_tokens;
        uint64_t bend = bstart + block_tokens;
        size_t len = ST_HASH_BYTES + 4 + (size_t)block_tokens * 4;
        size_t n_extras = 0;
        XXH128_hash_t x;

        memcpy(msg, prev, ST_HASH_BYTES);
        st_hash_put_u32(msg + ST_HASH_BYTES, block_tokens);
        st_hash_put_tokens(msg + ST_HASH_BYTES + 4, tokens + bstart, block_tokens);

        /* Items are sorted by start: skip those that ended before this block. */
        /* Skip the prefix of items that ended before this block; a long
         * item that started earlier may still overlap, so stop at the first
         * one that has not ended. */
        while (first_item < n_items &&
               items[first_item].start + items[first_item].n_tokens <= bstart) {
            first_item++;
        }
        for (size_t k = first_item; k < n_items && items[k].start < bend; k++) {
            int64_t off = (int64_t)items[k].start - (int64_t)bstart;

            if (items[k].start + items[k].n_tokens <= bstart) {
                continue; /* ended before this block */
            }
            if (off < INT32_MIN || off > INT32_MAX || n_extras >= ST_HASH_ITEMS_PER_BLOCK_MAX) {
                return ST_ERR_INVALID;
            }
            memcpy(msg + len, items[k].content.b, ST_HASH_BYTES);
            st_hash_put_u32(msg + len + ST_HASH_BYTES, (uint32_t)(int32_t)off);
            len += ST_HASH_EXTRA_BYTES;
            n_extras++;
        }
        x = XXH3_128bits(msg, len);
        st_hash_store(&x, &chain[i]);
        prev = chain[i].b;
    }
    return ST_OK;
}

#endif /* STRATA_HASH_IMPL_H */
