/*
 * mkhash.h - made-up block hashes for tests and benchmarks that need many
 * distinct keys and no token stream: any 16 bytes will do, since a daemon
 * cannot tell them from hashes of tokens.
 */
#ifndef STRATA_TEST_MKHASH_H
#define STRATA_TEST_MKHASH_H

#include <stdint.h>

#include "strata/hash.h"

/* The 128-bit XXH3 of i seeded with stream: hash i of stream. */
st_hash_t mh_hash(uint64_t stream, uint64_t i);

#endif
