/*
 * compose.h - composing the owners' per-segment lookup answers into the
 * longest cached prefix and the resumable prefix (ARCHITECTURE §5, §7).
 *
 * The longest prefix is every block of the leading segments that matched in
 * full, plus the matched leading blocks of the first segment that did not.
 * A segment whose owner did not answer counts as matching nothing, so data
 * on a lost node is never claimed. The resumable prefix ends after the last
 * KDA checkpoint at or before the end of the longest prefix: resuming needs
 * the KDA states there; the tokens after it are recomputed.
 */
#ifndef STRATA_PROTO_COMPOSE_H
#define STRATA_PROTO_COMPOSE_H

#include <stddef.h>
#include <stdint.h>

typedef struct compose_seg_answer {
    uint64_t first_block; /* index of the segment's first block in the chain */
    uint32_t n_blocks;    /* blocks asked about */
    uint32_t matched;     /* leading blocks present, 0..n_blocks */
    int answered;         /* 0 when the owner was down or failed */
    const uint64_t *kda;  /* chain indices of blocks with a KDA checkpoint, sorted */
    size_t n_kda;
} compose_seg_answer_t;

typedef struct compose_prefix {
    uint64_t matched_blocks;   /* longest prefix, in blocks */
    uint64_t resumable_blocks; /* blocks up to and including the last usable checkpoint */
    uint32_t segments_full;    /* leading segments that matched in full */
} compose_prefix_t;

/*
 * Composes n answers, given in chain order (segment k starts where k-1
 * ended). Answers that are out of order or overlap end the prefix there.
 */
void compose_prefix(const compose_seg_answer_t *answers, size_t n, compose_prefix_t *out);

#endif /* STRATA_PROTO_COMPOSE_H */
