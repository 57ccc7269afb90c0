/*
 * rowsum.h - row-group checksums of row-major objects (KV, IDX), what the
 * daemon computes at commit and the client checks on every row it accepts
 * (docs/transport.md "Row verification").
 *
 * An object of len bytes with row_bytes > 0 has floor(len / row_bytes) rows
 * (the bytes after the last whole row, such as IDX's block summary, belong
 * to no row). Rows are grouped PR_ROW_GROUP at a time from row 0 (the last
 * group may be short); group g's sum is the XXH3-64 (seed 0) of its rows'
 * bytes, and the sums travel packed, 8 bytes each, little-endian, in group
 * order (Locations.row_sums).
 *
 * Thread safety: pure functions.
 */
#ifndef STRATA_PROTO_ROWSUM_H
#define STRATA_PROTO_ROWSUM_H

#include <stddef.h>
#include <stdint.h>

/* Rows per group: 1, one sum per row (docs/transport.md says why). */
#define PR_ROW_GROUP     1u
/* The smallest row a writer may declare: the sums cost at most a quarter of
 * the object. */
#define PR_ROW_BYTES_MIN 32u

/* The number of groups of an object of len bytes (0 when row_bytes is 0 or
 * larger than the object). */
static inline uint64_t pr_rowsum_groups(uint64_t len, uint32_t row_bytes, uint32_t group)
{
    uint64_t rows = row_bytes ? len / row_bytes : 0;

    return group ? (rows + group - 1) / group : 0;
}

/* The sum of one group of bytes. */
uint64_t pr_rowsum(const void *p, size_t len);

/* Reads sum i of a packed array. */
static inline uint64_t pr_rowsum_at(const uint8_t *packed, uint64_t i)
{
    uint64_t v = 0;

    for (int b = 7; b >= 0; b--) {
        v = (v << 8) | packed[i * 8 + (uint64_t)b];
    }
    return v;
}

#endif /* STRATA_PROTO_ROWSUM_H */
