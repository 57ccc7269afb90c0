/* hash_internal.h - the per-instruction-set copies of the block loop. */
#ifndef STRATA_HASH_INTERNAL_H
#define STRATA_HASH_INTERNAL_H

#include "strata/hash.h"

/* hash.c: hash_blocks_impl() for the baseline instruction set. */
st_status_t hash_blocks_base(const st_hash_t *seed, const uint32_t *tokens, uint32_t block_tokens,
                             const st_hash_item_t *items, size_t n_items, st_hash_t *chain,
                             size_t n_blocks);

/* hash_avx2.c: hash_blocks_impl() compiled with -mavx2 (call it only
 * where the CPU has AVX2). */
st_status_t hash_blocks_avx2(const st_hash_t *seed, const uint32_t *tokens, uint32_t block_tokens,
                             const st_hash_item_t *items, size_t n_items, st_hash_t *chain,
                             size_t n_blocks);

/*
 * For tests: XXH3_128bits(msg, len) as the chain computes it (the split of
 * hash_impl.h where len is 241..1024 bytes), baseline and AVX2 copies.
 * out[0] is the low 64 bits, out[1] the high.
 */
void hash_split_test(const uint8_t *msg, size_t len, uint64_t out[2]);
void hash_split_test_avx2(const uint8_t *msg, size_t len, uint64_t out[2]);

#endif
