/* hash_internal.h - the per-instruction-set copies of the block loop. */
#ifndef STRATA_HASH_INTERNAL_H
#define STRATA_HASH_INTERNAL_H

#include "strata/hash.h"

/* hash_avx2.c: st_hash_blocks_impl() compiled with -mavx2. */
st_status_t st_hash_blocks_avx2(const st_hash_t *seed, const uint32_t *tokens,
                                uint32_t block_tokens, const st_hash_item_t *items, size_t n_items,
                                st_hash_t *chain, size_t n_blocks);

#endif
