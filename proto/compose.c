/*
 * compose.c - longest prefix and resumable prefix; see compose.h.
 */
#include "compose.h"

void compose_prefix(const compose_seg_answer_t *answers, size_t n, compose_prefix_t *out)
{
    uint64_t end = 0;
    uint64_t resumable = 0;
    uint32_t full = 0;

    for (size_t k = 0; k < n; k++) {
        const compose_seg_answer_t *a = &answers[k];
        uint32_t matched = a->answered ? a->matched : 0;

        if (a->first_block != end || matched > a->n_blocks) {
            break;
        }
        /* Checkpoints inside the matched part of this segment. */
        for (size_t i = 0; i < a->n_kda; i++) {
            uint64_t b = a->kda[i];

            if (b >= a->first_block && b < a->first_block + matched && b + 1 > resumable) {
                resumable = b + 1;
            }
        }
        end += matched;
        if (matched < a->n_blocks) {
            break;
        }
        full++;
    }
    out->matched_blocks = end;
    out->resumable_blocks = resumable;
    out->segments_full = full;
}
