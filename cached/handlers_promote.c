/*
 * handlers_promote.c - the one promote-and-retry of the data handlers
 * (docs/tiers.md, "In stratad", Promote): ask the store; when the answer
 * missed what the SSD tier's T2 index names, promote that into DRAM and ask
 * again, while promotions make progress.
 */
#include "handlers.h"
#include "tier.h"

st_status_t cd_h_ask_promoting(cd_daemon_t *d, const cd_h_ask_t *a)
{
    uint64_t gen = cd_tier_generation(d->tier);
    st_status_t status = a->ask(a->arg);

    for (int round = 0; d->tier != NULL && round < CD_H_PROMOTE_ROUNDS; round++) {
        int promoted;

        if (status != ST_OK && status != ST_ERR_NOT_FOUND) {
            break; /* not an answer: nothing to promote */
        }
        promoted = a->promote(a->arg, status);
        if (promoted == 0 && cd_tier_generation(d->tier) == gen) {
            break;
        }
        gen = cd_tier_generation(d->tier);
        status = a->ask(a->arg);
    }
    return status;
}
