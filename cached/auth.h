/*
 * auth.h - who is calling stratad: the authenticate callback of its server
 * (run before a request is unpacked), the per-Hello transport-call keys, the
 * cluster credential of peer daemons, and the checks that bind namespaces,
 * batches and leases to a principal (docs/security.md).
 *
 * Principals (tenants.h, cd_principal_t):
 * - with a tenants_file, a token of the file authenticates its one tenant;
 * - with auth_token alone, its holder is a principal allowed every tenant
 *   (one-box use, as before tenants existed);
 * - with neither, loopback callers (protected_mode) are such a principal;
 * - the cluster credential, derived from the cluster secret, is a peer
 *   daemon: it may call Lookup on any namespace (the ClusterLookup fan-out)
 *   and nothing else;
 * - a transport call presents the key its Hello handed out and acts as the
 *   principal of that Hello.
 *
 * Thread safety: every function may be called from any thread, except
 * cd_au_init/cd_au_destroy.
 */
#ifndef STRATA_CACHED_AUTH_H
#define STRATA_CACHED_AUTH_H

#include <pthread.h>
#include <stdint.h>

#include "srpc.h"
#include "tenants.h"

#define CD_AU_KEY_BYTES 16 /* a transport-call key (CD_DP_CALL_KEY) */
#define CD_AU_KEY_SETS  8192
#define CD_AU_KEY_WAYS \
    4 /* CD_AU_KEY_SETS x CD_AU_KEY_WAYS keys at most; the oldest of a set goes */

typedef struct cd_au_key {
    uint8_t k_key[CD_AU_KEY_BYTES];
    cd_principal_t k_pr;
    uint64_t k_seq; /* 0: free slot */
} cd_au_key_t;

typedef struct cd_auth {
    cd_tenants_t au_tenants;
    int au_has_tenants; /* a tenants_file is configured */
    char *au_tenants_path;
    const char *au_token; /* auth_token ("" none); owned by the config */
    int au_protected;
    char au_peer_token[2 * CD_TN_HASH_BYTES + 1];
    pthread_mutex_t au_keys_lock;
    cd_au_key_t *au_keys; /* CD_AU_KEY_SETS x CD_AU_KEY_WAYS */
    uint64_t au_key_seq;
    /* Asked before a reloaded table of n tenants replaces the current one
     * (the daemon's data-plane isolation check); non-OK keeps the old. */
    st_status_t (*au_check)(void *arg, size_t n_tenants);
    void *au_check_arg;
} cd_auth_t;

/*
 * Sets a up: loads tenants_path (NULL or "": none), keeps token (the
 * auth_token, "" none) and protected_mode, derives the cluster credential
 * from secret. Returns ST_OK, or the tenants file's error (logged);
 * ST_ERR_INVALID when both a tenants file and auth_token are set; ST_ERR_NOMEM.
 */
st_status_t cd_au_init(cd_auth_t *a, const char *tenants_path, const char *token,
                       int protected_mode, const char *secret);

/* Frees a. No call may be running. */
void cd_au_destroy(cd_auth_t *a);

/*
 * Re-reads the tenants file (SIGHUP). On success the new table serves the
 * next calls; tenants it no longer names are refused from then on, their
 * transport keys with them. On failure the old table stays (the reason is
 * logged), also when au_check refuses the new table. Returns ST_OK,
 * ST_ERR_UNSUPPORTED without a tenants file, or the load's or au_check's status.
 */
st_status_t cd_au_reload(cd_auth_t *a);

/*
 * Authenticates a call for a (the daemon's srpc_auth_fn forwards to it). With a
 * tenants file, a verified client certificate (identity: its subject CN)
 * whose CN is a tenant's cert= authenticates that tenant without a token; a
 * token and a certificate that name different tenants are PERMISSION_DENIED.
 * Without a tenants file, in protected mode, a verified certificate is a
 * credential like auth_token (a principal allowed every tenant), so remote
 * clients with one are served.
 */
st_status_t cd_au_authenticate(cd_auth_t *a, const char *path, const char *token, const char *peer,
                               const char *identity, void *principal, char *msg, size_t msg_cap);

/* The principal of a call (never NULL while stratad's server runs the call). */
const cd_principal_t *cd_au_principal(srpc_ctx_t *ctx);

/*
 * The Hello client id the call presents: the one bound to its transport key,
 * else metadata strata-client: <16 hex>; 0 when none.
 */
uint64_t cd_au_client(srpc_ctx_t *ctx);

/*
 * Lease ids on the wire are the store's (random) lease id XOR the caller's
 * client id (cd_au_client; 0 for a caller without one): only the client
 * that got a lease can name it to Release; a lease granted to a caller
 * without a client id (a stock client, a peer's fan-out) is bound to the
 * tenant only (handlers_data.c).
 */

/* 1 when pr may act on a namespace of tenant. */
int cd_au_may_tenant(const cd_principal_t *pr, const char *tenant);

/*
 * Draws a new transport-call key bound to pr and client (written to key).
 * Returns ST_OK or ST_ERR_INTERNAL when no randomness is available (logged).
 */
st_status_t cd_au_key_issue(cd_auth_t *a, const cd_principal_t *pr, uint64_t client, uint8_t *key);

/* A random 64-bit value, never 0 (getrandom). Returns 0 only when the kernel has none. */
uint64_t cd_au_random64(void);

#endif /* STRATA_CACHED_AUTH_H */
