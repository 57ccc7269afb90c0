/*
 * hash_avx2.c - the block loop of the hash chain built with -mavx2; called
 * only when the CPU reports AVX2 (hash.c checks).
 */
#include "hash_impl.h"
#include "hash_internal.h"

st_status_t hash_blocks_avx2(const st_hash_t *seed, const uint32_t *tokens, uint32_t block_tokens,
                             const st_hash_item_t *items, size_t n_items, st_hash_t *chain,
                             size_t n_blocks)
{
    return hash_blocks_impl(seed, tokens, block_tokens, items, n_items, chain, n_blocks);
}

void hash_split_test_avx2(const uint8_t *msg, size_t len, uint64_t out[2])
{
    XXH128_hash_t x = hash_split(msg, len);

    out[0] = x.low64;
    out[1] = x.high64;
}
