/*
 * unit_hash.h - made-up block hashes of the unit tests that need them
 * predictable: a in bytes 0..3, b in bytes 4..7 (host order), tag in byte 15
 * (a test's own, so its hashes are its own), zeros elsewhere.
 */
#ifndef STRATA_TESTS_UNIT_HASH_H
#define STRATA_TESTS_UNIT_HASH_H

#include <stdint.h>
#include <string.h>

#include "strata/hash.h"

static inline st_hash_t unit_hash(uint32_t a, uint32_t b, uint8_t tag)
{
    st_hash_t h = {{0}};

    memcpy(h.b, &a, 4);
    memcpy(h.b + 4, &b, 4);
    h.b[15] = tag;
    return h;
}

#endif
