/*
 * rowsum.c - row-group checksums (rowsum.h).
 */
#include "rowsum.h"

#include <xxhash.h>

uint64_t pr_rowsum(const void *p, size_t len)
{
    return XXH3_64bits(p, len);
}

void pr_rowsum_all(const void *data, uint64_t len, uint32_t row_bytes, uint32_t group,
                   uint64_t n_groups, uint8_t *out)
{
    const uint8_t *p = data;
    uint64_t rows = len / row_bytes, glen = (uint64_t)row_bytes * group;

    for (uint64_t g = 0; g < n_groups; g++) {
        uint64_t first = g * group, n = rows - first < group ? rows - first : group;
        uint64_t v = pr_rowsum(p + g * glen, (size_t)(n * row_bytes));

        for (int b = 0; b < 8; b++) {
            out[g * 8 + (uint64_t)b] = (uint8_t)(v >> (8 * b));
        }
    }
}
