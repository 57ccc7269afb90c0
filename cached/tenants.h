/*
 * tenants.h - stratad's tenants: the tenants file (tenants_file), the
 * principal of a call, and the credentials that make one.
 *
 * The tenants file has one line per tenant:
 *
 *     acme sha256:<64 hex> models=k3,k3-vl cert=acme memory=64G ssd=1T sessions=100000
 *          pins=10000 namespaces=8 leases=100000 reservations=10000
 *
 * (one line; `#` starts a comment; blank lines are skipped). The hash is the
 * SHA-256 of the tenant's token; a token authenticates exactly one tenant.
 * cert=<CN>: a client certificate that the server verified (mutual TLS)
 * whose subject common name is CN authenticates the tenant too; two tenants
 * may not name one CN.
 * Every field after the hash is optional: models= absent means any model,
 * every quota absent or 0 means unlimited, except namespaces (default
 * CD_TN_DEFAULT_NAMESPACES).
 *
 * A table is immutable once loaded. Reloading builds a new table and swaps it
 * in (cd_tn_swap); the old table's tenants stay allocated until the daemon
 * is destroyed (cd_tn_free_all), so a principal that points at one stays
 * valid for every call in flight. A tenant that a reload dropped is marked
 * removed; calls authenticated as it before the reload are refused after.
 *
 * Thread safety: cd_tn_find_token, cd_tn_current and cd_tn_swap may run on
 * any thread at once.
 */
#ifndef STRATA_CACHED_TENANTS_H
#define STRATA_CACHED_TENANTS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "store.h"
#include "strata/status.h"

#define CD_TN_DEFAULT_NAMESPACES 8
#define CD_TN_MAX_MODELS         64
#define CD_TN_HASH_BYTES         32
#define CD_TN_CERT_MAX           255 /* SRPC_MAX_IDENTITY */

/* A tenant's quotas from the tenants file; 0 is unlimited. */
typedef struct cd_tn_quota {
    uint64_t memory;       /* DRAM bytes */
    uint64_t ssd;          /* SSD tier bytes */
    uint64_t sessions;     /* open sessions */
    uint64_t pins;         /* pinned objects */
    uint64_t namespaces;   /* namespaces (tenant x model); default CD_TN_DEFAULT_NAMESPACES */
    uint64_t leases;       /* read leases held */
    uint64_t reservations; /* reservations in flight */
} cd_tn_quota_t;

typedef struct cd_tn_tenant {
    char tn_name[CD_NAME_MAX + 1];
    uint8_t tn_hash[CD_TN_HASH_BYTES]; /* SHA-256 of the token */
    char tn_cert[CD_TN_CERT_MAX + 1];  /* cert=: the client certificate CN; "" none */
    char *tn_models[CD_TN_MAX_MODELS]; /* n_models == 0: any model */
    size_t tn_n_models;
    cd_tn_quota_t tn_quota;
    _Atomic int tn_removed;           /* set when a reload dropped this tenant */
    struct cd_tn_tenant *tn_all_next; /* every tenant ever loaded, for cd_tn_free_all */
} cd_tn_tenant_t;

typedef struct cd_tn_table {
    cd_tn_tenant_t **tt_tenants;
    size_t tt_n;
    struct cd_tn_table *tt_older; /* tables swapped out, freed by cd_tn_free_all */
} cd_tn_table_t;

/* The tenants of a daemon: the current table and everything it replaced. */
typedef struct cd_tenants {
    pthread_mutex_t tns_lock; /* guards tns_cur's swap and the lists */
    cd_tn_table_t *_Atomic tns_cur;
    cd_tn_tenant_t *tns_all;
} cd_tenants_t;

/* What authenticated a call (the srpc principal of the daemon). */
typedef enum cd_principal_kind {
    CD_PR_NONE = 0, /* not authenticated (a Health check) */
    CD_PR_ANY,      /* auth_token, or loopback without authentication: every tenant */
    CD_PR_TENANT,   /* a token of the tenants file, or a transport key of its Hello */
    CD_PR_PEER,     /* another daemon of the cluster (the cluster credential) */
} cd_principal_kind_t;

typedef struct cd_principal {
    cd_principal_kind_t pr_kind;
    const cd_tn_tenant_t *pr_tenant; /* CD_PR_TENANT */
    uint64_t pr_client;              /* the Hello's client id when the call presented it; 0 none */
} cd_principal_t;

/*
 * Parses the tenants file at path into a new table. Returns ST_OK with
 * *table_p; ST_ERR_IO when the file cannot be read; ST_ERR_INVALID for a bad
 * line, a duplicate name or a duplicate token hash (logged with path:line);
 * ST_ERR_NOMEM.
 */
st_status_t cd_tn_load(const char *path, cd_tn_table_t **table_p);

/* Frees a table that was never swapped in, with its tenants. */
void cd_tn_table_free(cd_tn_table_t *t);

/* Initialises tns with table t (may be NULL: no tenants file). */
void cd_tn_init(cd_tenants_t *tns, cd_tn_table_t *t);

/*
 * Makes t the current table; tenants of the old one that t does not name, or
 * names with another token hash, are marked removed. The old table stays allocated (see the file comment).
 */
void cd_tn_swap(cd_tenants_t *tns, cd_tn_table_t *t);

/* Frees every table and tenant. No call may be running. */
void cd_tn_free_all(cd_tenants_t *tns);

/* The current table, or NULL without a tenants file. */
const cd_tn_table_t *cd_tn_current(const cd_tenants_t *tns);

/*
 * Finds the tenant of token (SHA-256, compared with CRYPTO_memcmp against
 * every tenant so the time does not depend on which one matched). NULL: none.
 */
const cd_tn_tenant_t *cd_tn_find_token(const cd_tenants_t *tns, const char *token);

/* Finds a tenant of the current table by name; NULL: none. */
const cd_tn_tenant_t *cd_tn_find_name(const cd_tenants_t *tns, const char *name);

/* Finds the tenant of the current table whose cert= is cn; NULL: none (or cn NULL). */
const cd_tn_tenant_t *cd_tn_find_cert(const cd_tenants_t *tns, const char *cn);

/* 1 when the tenant may use model. */
int cd_tn_model_allowed(const cd_tn_tenant_t *t, const char *model);

/* The tenant's quotas (0: unlimited). */
const cd_tn_quota_t *cd_tn_quota(const cd_tn_tenant_t *t);

/*
 * Calls fn(arg, tenant) for every tenant of the current table, in file
 * order (for example to hand each tenant's quotas to the store after a load
 * or a reload). fn must not call cd_tn_swap.
 */
void cd_tn_foreach(cd_tenants_t *tns, void (*fn)(void *arg, const cd_tn_tenant_t *t), void *arg);

/*
 * Fills out (CD_TN_HASH_BYTES) with HMAC-SHA-256(key, msg). Returns ST_OK or
 * ST_ERR_INTERNAL when OpenSSL fails (logged).
 */
st_status_t cd_tn_hmac(const void *key, size_t key_len, const void *msg, size_t msg_len,
                       uint8_t *out);

/*
 * Writes the cluster credential (the bearer token daemons present to each
 * other): hex of HMAC-SHA-256(secret, "strata-peer-v1"), NUL-terminated, into
 * out (at least 2 * CD_TN_HASH_BYTES + 1 bytes).
 */
st_status_t cd_tn_peer_token(const char *secret, char *out);

/*
 * Reads a secret: from the file at path when path is not empty (the first
 * line, without its newline), else from the environment variable env when
 * it is set and *value is empty. Replaces *value (malloc'd) on success.
 * Returns ST_OK (nothing to read is OK), ST_ERR_IO (unreadable file; logged),
 * ST_ERR_NOMEM. The secret is never logged.
 */
st_status_t cd_tn_read_secret(char **value, const char *path, const char *env, const char *name);

#endif /* STRATA_CACHED_TENANTS_H */
