/*
 * rowsum.c - row-group checksums (rowsum.h).
 */
#include "rowsum.h"

#include <xxhash.h>

uint64_t pr_rowsum(const void *p, size_t len)
{
    return XXH3_64bits(p, len);
}
