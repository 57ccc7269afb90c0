/* mkhash.c - see mkhash.h. */
#include "mkhash.h"

#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

st_hash_t mh_hash(uint64_t stream, uint64_t i)
{
    XXH128_hash_t x = XXH3_128bits_withSeed(&i, sizeof(i), stream);
    st_hash_t h;

    memcpy(h.b, &x.low64, 8);
    memcpy(h.b + 8, &x.high64, 8);
    return h;
}
