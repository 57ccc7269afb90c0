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

#include "bytes.h"
#include "strata/hash.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#define HASH_EXTRA_BYTES (ST_HASH_BYTES + 4)
#define HASH_MSG_MAX \
    (ST_HASH_BYTES + 4 + 4 * ST_BLOCK_TOKENS_MAX + HASH_EXTRA_BYTES * ST_HASH_ITEMS_PER_BLOCK_MAX)

static inline void hash_store(const XXH128_hash_t *x, st_hash_t *out)
{
    cm_put_le64(out->b, x->low64);
    cm_put_le64(out->b + 8, x->high64);
}

/* Writes n tokens little-endian; a plain copy on little-endian hosts. */
static inline void hash_put_tokens(uint8_t *p, const uint32_t *tokens, uint32_t n)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    memcpy(p, tokens, (size_t)n * 4);
#else
    for (uint32_t i = 0; i < n; i++) {
        cm_put_le32(p + 4 * i, tokens[i]);
    }
#endif
}

/*
 * The chain's own XXH3-128.
 *
 * A block's message is h[i-1] (16 bytes) followed by what does not depend on
 * the chain: the count, the tokens, the extras. XXH3 hashes a message of 241
 * to 1,024 bytes (64- to 240-token blocks with the default secret) as one sum
 * of per-stripe terms into eight 64-bit accumulators, then two merges of those
 * accumulators; the first 16 bytes enter only acc[0] and acc[1], through one
 * stripe term each. So everything else - all the other stripes, and the merge
 * terms of acc[2..7] - is computed before h[i-1] is known (hash_part, no
 * dependence between blocks, so the CPU overlaps it with the previous
 * block's tail), and the serial step left per block is two 32x32 multiplies,
 * two 128-bit multiplies and two avalanches (hash_finish). The result is
 * XXH3_128bits() of the message bit for bit: test_hash checks it against
 * libxxhash for every such length, and the chains against the Python
 * reference.
 *
 * It uses xxHash's own stripe accumulator (XXH3_accumulate_512, the vector
 * code this file's flags select) and default secret, through XXH_INLINE_ALL.
 */
#if XXH_VERSION_NUMBER < 800
#error "xxHash 0.8 or later is needed (XXH3's output is stable from 0.8.0)"
#endif

#define HASH_PART_MIN  (XXH3_MIDSIZE_MAX + 1) /* shorter messages take XXH3's short paths */
#define HASH_PART_MAX  1024 /* one XXH3 block of the default secret: no scramble */
#define HASH_SECRET_LO 11   /* offset of the low half's merge secret */
#define HASH_SECRET_HI (XXH_SECRET_DEFAULT_SIZE - 64 - HASH_SECRET_LO)

typedef struct hash_part {
    uint64_t a0, a1; /* acc[0], acc[1] without the first 16 bytes' terms */
    uint64_t lo, hi; /* each merge's sum without its (acc[0], acc[1]) term */
} hash_part_t;

static inline uint64_t hash_mul32(uint64_t k)
{
    return (k & 0xffffffffULL) * (k >> 32);
}

/*
 * XXH3's mul128_fold64, mix2Accs and avalanche, spelled out here so that
 * they are inlined (libxxhash 0.8.1 leaves them as calls); the test against
 * XXH3_128bits() keeps them equal.
 */
static inline uint64_t hash_fold(uint64_t a, uint64_t b)
{
#if defined(__SIZEOF_INT128__)
    unsigned __int128 m = (unsigned __int128)a * b;

    return (uint64_t)m ^ (uint64_t)(m >> 64);
#else
    return XXH3_mul128_fold64(a, b);
#endif
}

static inline uint64_t hash_mix2(const uint64_t *acc, const uint8_t *sec)
{
    return hash_fold(acc[0] ^ XXH_readLE64(sec), acc[1] ^ XXH_readLE64(sec + 8));
}

static inline uint64_t hash_avalanche(uint64_t h)
{
    h ^= h >> 37;
    h *= 0x165667919E3779F9ULL;
    return h ^ (h >> 32);
}

/*
 * Message byte j >= 24 is msg[j]; msg[0, 24) may hold anything readable
 * (the chain passes the tokens in place, so those are the previous block's
 * last tokens) and is corrected for: lanes 0 and 1 (the prefix) are taken
 * out, lane 2 is replaced by the real bytes 16..23, lane2.
 * len in [HASH_PART_MIN, HASH_PART_MAX].
 */
static inline void hash_part(const uint8_t *msg, size_t len, uint64_t lane2, hash_part_t *p)
{
    XXH_ALIGN(64) uint64_t acc[XXH_ACC_NB] = XXH3_INIT_ACC;
    const uint8_t *sec = XXH3_kSecret;
    size_t stripes = (len - 1) / XXH_STRIPE_LEN;
    uint64_t g0 = XXH_readLE64(msg), g1 = XXH_readLE64(msg + 8), g2 = XXH_readLE64(msg + 16);

    for (size_t s = 0; s < stripes; s++) {
        XXH3_accumulate_512(acc, msg + s * XXH_STRIPE_LEN, sec + s * XXH_SECRET_CONSUME_RATE);
    }
    XXH3_accumulate_512(acc, msg + len - XXH_STRIPE_LEN,
                        sec + XXH_SECRET_DEFAULT_SIZE - XXH_STRIPE_LEN - XXH_SECRET_LASTACC_START);
    /* Lane k of a stripe adds its word w to acc[k ^ 1] and mul32(w ^ secret) to acc[k]. */
    p->a0 = acc[0] - g1 - hash_mul32(g0 ^ XXH_readLE64(sec));
    p->a1 = acc[1] - g0 - hash_mul32(g1 ^ XXH_readLE64(sec + 8));
    acc[3] += lane2 - g2;
    acc[2] += hash_mul32(lane2 ^ XXH_readLE64(sec + 16)) - hash_mul32(g2 ^ XXH_readLE64(sec + 16));
    p->lo = (uint64_t)len * XXH_PRIME64_1;
    p->hi = ~((uint64_t)len * XXH_PRIME64_2);
    for (int i = 1; i < 4; i++) {
        p->lo += hash_mix2(acc + 2 * i, sec + HASH_SECRET_LO + 16 * i);
        p->hi += hash_mix2(acc + 2 * i, sec + HASH_SECRET_HI + 16 * i);
    }
}

/* Adds the first 16 bytes (hl, hh: little-endian words) and merges. */
static inline void hash_finish(const hash_part_t *p, uint64_t *hl, uint64_t *hh)
{
    const uint8_t *sec = XXH3_kSecret;
    uint64_t a0 = p->a0 + *hh + hash_mul32(*hl ^ XXH_readLE64(sec));
    uint64_t a1 = p->a1 + *hl + hash_mul32(*hh ^ XXH_readLE64(sec + 8));

    *hl = hash_avalanche(p->lo + hash_fold(a0 ^ XXH_readLE64(sec + HASH_SECRET_LO),
                                           a1 ^ XXH_readLE64(sec + HASH_SECRET_LO + 8)));
    *hh = hash_avalanche(p->hi + hash_fold(a0 ^ XXH_readLE64(sec + HASH_SECRET_HI),
                                           a1 ^ XXH_readLE64(sec + HASH_SECRET_HI + 8)));
}

/*
 * XXH3_128bits(msg, len) computed by the split above where len allows it,
 * else by XXH3_128bits itself: test_hash compares the two for every length.
 */
static inline XXH128_hash_t hash_split(const uint8_t *msg, size_t len)
{
    uint64_t hl, hh;
    hash_part_t p;
    XXH128_hash_t x;

    if (len < HASH_PART_MIN || len > HASH_PART_MAX) {
        return XXH3_128bits(msg, len);
    }
    hash_part(msg, len, XXH_readLE64(msg + 16), &p);
    hl = XXH_readLE64(msg);
    hh = XXH_readLE64(msg + 8);
    hash_finish(&p, &hl, &hh);
    x.low64 = hl;
    x.high64 = hh;
    return x;
}

/*
 * Hashes n_blocks full blocks; items were checked by the caller.
 * Returns ST_OK, or ST_ERR_INVALID when an item offset does not fit in 32 bits
 * or too many items overlap one block.
 */
static inline st_status_t hash_blocks_impl(const st_hash_t *seed, const uint32_t *tokens,
                                           uint32_t block_tokens, const st_hash_item_t *items,
                                           size_t n_items, st_hash_t *chain, size_t n_blocks)
{
    XXH_ALIGN(64) uint8_t msg[HASH_MSG_MAX];
    const size_t skip = ST_HASH_BYTES + 4; /* message bytes before the first token */
    const size_t plain_len = skip + (size_t)block_tokens * 4;
    const int split = plain_len >= HASH_PART_MIN && plain_len <= HASH_PART_MAX;
    size_t first_item = 0;
    uint64_t hl = XXH_readLE64(seed->b), hh = XXH_readLE64(seed->b + 8);

    memset(msg, 0, ST_HASH_BYTES);
    cm_put_le32(msg + ST_HASH_BYTES, block_tokens);
    for (size_t i = 0; i < n_blocks; i++) {
        uint64_t bstart = (uint64_t)i * block_tokens;
        uint64_t bend = bstart + block_tokens;
        const uint8_t *tb = (const uint8_t *)(tokens + bstart);
        size_t len = plain_len;
        size_t n_extras = 0;
        hash_part_t p;

        /* Items are sorted by start: skip the prefix of those that ended
         * before this block; a long item that started earlier may still
         * overlap, so stop at the first one that has not ended. */
        while (first_item < n_items &&
               items[first_item].start + items[first_item].n_tokens <= bstart) {
            first_item++;
        }
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        if (split && i > 0 && (first_item == n_items || items[first_item].start >= bend)) {
            /* No extras: hash the tokens where they lie; the 20 bytes before
             * them (the previous block's) stand in for the header. */
            uint32_t t0;

            memcpy(&t0, tb, 4);
            hash_part(tb - skip, len, (uint64_t)t0 << 32 | block_tokens, &p);
            hash_finish(&p, &hl, &hh);
            goto store;
        }
#endif
        hash_put_tokens(msg + skip, tokens + bstart, block_tokens);
        for (size_t k = first_item; k < n_items && items[k].start < bend; k++) {
            int64_t off = (int64_t)items[k].start - (int64_t)bstart;

            if (items[k].start + items[k].n_tokens <= bstart) {
                continue; /* ended before this block */
            }
            if (off < INT32_MIN || off > INT32_MAX || n_extras >= ST_HASH_ITEMS_PER_BLOCK_MAX) {
                return ST_ERR_INVALID;
            }
            memcpy(msg + len, items[k].content.b, ST_HASH_BYTES);
            cm_put_le32(msg + len + ST_HASH_BYTES, (uint32_t)(int32_t)off);
            len += HASH_EXTRA_BYTES;
            n_extras++;
        }
        if (len >= HASH_PART_MIN && len <= HASH_PART_MAX) {
            hash_part(msg, len, XXH_readLE64(msg + 16), &p);
            hash_finish(&p, &hl, &hh);
        } else {
            XXH128_hash_t x;

            cm_put_le64(msg, hl);
            cm_put_le64(msg + 8, hh);
            x = XXH3_128bits(msg, len);
            memset(msg, 0, ST_HASH_BYTES);
            hl = x.low64;
            hh = x.high64;
        }
    store:
        cm_put_le64(chain[i].b, hl);
        cm_put_le64(chain[i].b + 8, hh);
    }
    return ST_OK;
}

#endif /* STRATA_HASH_IMPL_H */
