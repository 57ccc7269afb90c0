/*
 * daemon_tenancy.c - the daemon's tenancy checks: whether several tenants
 * may share its data plane (at start and at every tenants_file reload), the
 * tenants' quotas handed to the store, the reload itself, and which tenants
 * the current table knows.
 */
#include "daemon.h"

#include "dataplane.h"

#include <stdlib.h>
#include <string.h>

#include "log.h"

/* Tenants of the current table (0 without a tenants file). */
size_t cd_daemon_n_tenants(const cd_daemon_t *d)
{
    const cd_tn_table_t *t = cd_tn_current(&d->auth.au_tenants);

    return t != NULL ? t->tt_n : 0;
}

/* 1 when the data plane runs and checks no remote key. */
static int cd_daemon_dp_open(const cd_daemon_t *d)
{
    return d->dp != NULL && !cd_dp_committed_read_only(d->dp);
}

int cd_daemon_dataplane_isolated(cd_daemon_t *d)
{
    return !cd_daemon_dp_open(d) || cd_daemon_n_tenants(d) <= 1;
}

/*
 * Whether n_tenants tenants may share this daemon's data plane: refused
 * (ST_ERR_INVALID, logged as an error naming the fixes) when there are
 * several and the transport checks no remote key, unless
 * allow_shared_dataplane (then a warning, at start and at every reload).
 * `what` says what is refused ("refusing to start", "reload refused ...").
 * Also the reload check of the auth module (cd_auth_t's au_check).
 */
st_status_t cd_daemon_isolation(cd_daemon_t *d, size_t n_tenants, const char *what)
{
    if (n_tenants <= 1 || !cd_daemon_dp_open(d)) {
        return ST_OK;
    }
    if (d->cfg.shared_dataplane) {
        lg_warn("allow_shared_dataplane=true: tenants_file names %zu tenants and transport=%s "
                "does not enforce remote keys: any client that reaches this daemon's data plane "
                "can read and write every tenant's memory (strata_dataplane_isolated 0; "
                "docs/security.md)",
                n_tenants, d->cfg.transport);
        return ST_OK;
    }
    lg_error("%s: tenants_file names %zu tenants but transport=%s does not enforce remote keys "
             "(%s): any client that reaches this "
             "daemon's data plane could read and write every tenant's memory. Use "
             "transport=libfabric (tcp;ofi_rxm, shm, sockets and udp;ofi_rxd enforce keys), or "
             "one daemon per tenant, or UCX over InfiniBand verbs, whose NIC checks keys but "
             "which stratad cannot measure here and so counts as not enforcing; or set "
             "allow_shared_dataplane=true to accept the risk (docs/security.md)",
             what, n_tenants, d->cfg.transport,
             strcmp(d->cfg.transport, "libfabric") == 0
                 ? "this fabric_provider is not one measured to enforce them"
                 : "UCX over sm, posix, cma and tcp checks none");
    return ST_ERR_INVALID;
}

/* The auth module's reload check (au_check). */
st_status_t cd_daemon_reload_check(void *arg, size_t n_tenants)
{
    return cd_daemon_isolation(arg, n_tenants, "tenants_file reload refused, the old table stays");
}

/* What cd_daemon_quota_one does with each tenant of the tenants file. */
typedef struct cd_quota_walk {
    cd_store_t *qw_store;
    st_status_t qw_status;
} cd_quota_walk_t;

/* Hands tenant t's quotas of the tenants file to the store. */
static void cd_daemon_quota_one(void *arg, const cd_tn_tenant_t *t)
{
    cd_quota_walk_t *w = arg;
    const cd_tn_quota_t *f = cd_tn_quota(t);
    cd_tenant_quota_t q = {
        .memory_bytes = f->memory,
        .ssd_bytes = f->ssd,
        .sessions = f->sessions,
        .pins = f->pins,
        .leases = f->leases,
        .reservations = f->reservations,
        .namespaces = f->namespaces,
    };
    cd_err_t err = {""};
    st_status_t status = cd_store_tenant_set(w->qw_store, t->tn_name, &q, &err);

    if (status != ST_OK) {
        lg_error("cannot set the quotas of tenant %s: %s", t->tn_name, err.msg);
        w->qw_status = status;
    }
}

/*
 * Hands every tenant's quotas of the current tenants table to the store
 * (after the load and after each reload). A tenant the store knows that the
 * table no longer names (a reload removed it) keeps its last quotas, except
 * memory, lowered to 1 byte: no principal can reach its namespaces any more
 * (cached/auth.c refuses it), and its DRAM is what eviction takes first.
 * Returns ST_OK, or the first error of the store (logged).
 */
st_status_t cd_daemon_apply_quotas(cd_daemon_t *d)
{
    cd_quota_walk_t w = {d->store, ST_OK};
    cd_tenant_usage_t *u;
    size_t n;

    if (!d->auth.au_has_tenants || d->store == NULL) {
        return ST_OK; /* no tenants file: no quotas (docs/security.md) */
    }
    cd_tn_foreach(&d->auth.au_tenants, cd_daemon_quota_one, &w);
    n = cd_store_tenants(d->store, NULL, 0);
    u = n != 0 ? calloc(n, sizeof(*u)) : NULL;
    if (n != 0 && u == NULL) {
        return ST_ERR_NOMEM;
    }
    n = cd_store_tenants(d->store, u, n);
    for (size_t i = 0; u != NULL && i < n; i++) {
        cd_err_t err = {""};

        if (cd_tn_find_name(&d->auth.au_tenants, u[i].tenant) != NULL ||
            u[i].quota.memory_bytes == 1) {
            continue;
        }
        u[i].quota.memory_bytes = 1;
        if (cd_store_tenant_set(d->store, u[i].tenant, &u[i].quota, &err) != ST_OK) {
            lg_error("cannot lower the quotas of removed tenant %s: %s", u[i].tenant, err.msg);
            w.qw_status = ST_ERR_NOMEM;
        } else {
            lg_info("tenant removed by the tenants file: its namespaces are refused and its "
                    "memory is evicted first tenant=%s",
                    u[i].tenant);
        }
    }
    free(u);
    return w.qw_status;
}

st_status_t cd_daemon_reload(cd_daemon_t *d)
{
    st_status_t status = cd_au_reload(&d->auth);

    if (status != ST_OK) {
        return status;
    }
    return cd_daemon_apply_quotas(d);
}

int cd_daemon_tenant_known(cd_daemon_t *d, const char *tenant)
{
    return !d->auth.au_has_tenants || cd_tn_find_name(&d->auth.au_tenants, tenant) != NULL;
}
