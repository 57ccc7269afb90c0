/*
 * daemon_tier.c - the daemon's wiring of the SSD tier (tier.h): the tier's
 * settings from the config table (data_dir, ssd_*) and the namespace
 * resolver that recovery re-creates namespaces through.
 */
#include "daemon.h"
#include "rebalance.h"
#include "tier.h"

_Static_assert(CD_TIER_NS_MAX >= CD_MAX_NS, "the tier must know every local namespace id");

/* The tier's namespace resolver (cd_tier_ns_open_fn); arg is the daemon. */
static cd_tier_ns_result_t cd_daemon_tier_ns_open(void *arg, uint64_t wire_id, const char *tenant,
                                                  const char *model, uint32_t block_tokens,
                                                  cd_err_t *err)
{
    cd_daemon_t *d = arg;
    cd_ns_entry_t *e;

    if (cd_wire_ns_id(tenant, model) != wire_id) {
        return CD_TIER_NS_OTHER_ID;
    }
    if (!cd_daemon_tenant_known(d, tenant)) {
        return CD_TIER_NS_NOT_SERVED;
    }
    return cd_daemon_ns_open(d, tenant, model, block_tokens, &e, err) == ST_OK ? CD_TIER_NS_OPENED
                                                                               : CD_TIER_NS_FAILED;
}

/* What recovery found that the rebalancer moves (cd_tier_durable_fn). */
static void cd_daemon_tier_durable(void *arg, uint64_t wire_id, uint32_t kind, const st_hash_t *id,
                                   uint32_t layer, const st_hash_t *parent,
                                   const st_hash_t *placement)
{
    cd_daemon_t *d = arg;

    (void)cd_rb_note(d->rb, wire_id, kind, id, layer, parent, placement);
}

st_status_t cd_daemon_tier_open(cd_daemon_t *d)
{
    cd_tier_params_t p = {
        .dir = d->cfg.data_dir,
        .node_id = d->cfg.node_id,
        .map_size = d->cfg.ssd_map_size,
        .spill_budget = d->cfg.ssd_spill_budget,
        .sync_none = d->cfg.ssd_sync == 1,
        .spill = d->cfg.ssd_spill,
        .writeback = d->cfg.ssd_writeback,
        .ns_open = cd_daemon_tier_ns_open,
        .ns_arg = d,
        .durable_found = cd_daemon_tier_durable,
    };

    return cd_tier_open(&p, &d->tier);
}
