/*
 * xxh.h - XXH3 at the speed of this CPU, for code that hashes object
 * bytes (checksums of whole objects run over every byte stored, read or
 * spilled).
 *
 * Debian's libxxhash is built for the baseline instruction set (SSE2 on
 * x86-64) and ships a runtime dispatcher beside it: XXH3_64bits_dispatch()
 * and friends pick AVX2 or AVX-512 where the CPU has them (about three times
 * the SSE2 speed on the development machine's Xeon: 45 against 14 GB/s over
 * 42 KB). Where its header is installed, including this file instead of
 * <xxhash.h> makes XXH3_64bits, XXH3_64bits_update and the 128-bit
 * functions those dispatched versions (the header's own #defines); the
 * results are the same bits. Not for a file that defines XXH_INLINE_ALL.
 */
#ifndef STRATA_XXH_H
#define STRATA_XXH_H

#include <xxhash.h>

#if defined(__x86_64__) && defined(__has_include)
#if __has_include(<xxh_x86dispatch.h>)
#include <xxh_x86dispatch.h>
#define CM_XXH_DISPATCH 1
#endif
#endif

#endif
