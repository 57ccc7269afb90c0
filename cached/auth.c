/*
 * auth.c - stratad's authentication callback, transport-call keys and
 * ownership checks (auth.h).
 */
#include "auth.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <openssl/crypto.h>

#include "log.h"

_Static_assert(sizeof(cd_principal_t) <= SRPC_PRINCIPAL_MAX, "the principal fits srpc's buffer");

uint64_t cd_au_random64(void)
{
    uint64_t v = 0;

    for (int i = 0; i < 8 && v == 0; i++) {
        if (getrandom(&v, sizeof(v), 0) != (ssize_t)sizeof(v)) {
            lg_error("cannot draw random bytes: %s", strerror(errno));
            return 0;
        }
    }
    return v;
}

st_status_t cd_au_init(cd_auth_t *a, const char *tenants_path, const char *token,
                       int protected_mode, const char *secret)
{
    cd_tn_table_t *t = NULL;
    st_status_t status;

    memset(a, 0, sizeof(*a));
    pthread_mutex_init(&a->au_keys_lock, NULL);
    a->au_token = token != NULL ? token : "";
    a->au_protected = protected_mode;
    a->au_keys = calloc((size_t)CD_AU_KEY_SETS * CD_AU_KEY_WAYS, sizeof(*a->au_keys));
    if (a->au_keys == NULL) {
        cd_tn_init(&a->au_tenants, NULL);
        return ST_ERR_NOMEM;
    }
    if (tenants_path != NULL && tenants_path[0] != '\0') {
        if (a->au_token[0] != '\0') {
            lg_error("auth_token and tenants_file are both set: with a tenants file every "
                     "token belongs to a tenant of the file; drop auth_token");
            cd_tn_init(&a->au_tenants, NULL);
            return ST_ERR_INVALID;
        }
        status = cd_tn_load(tenants_path, &t);
        if (status != ST_OK) {
            cd_tn_init(&a->au_tenants, NULL);
            return status;
        }
        a->au_has_tenants = 1;
        a->au_tenants_path = strdup(tenants_path);
        if (a->au_tenants_path == NULL) {
            cd_tn_init(&a->au_tenants, t);
            return ST_ERR_NOMEM;
        }
        lg_info("tenants loaded tenants_file=%s tenants=%zu", tenants_path, t->tt_n);
    }
    cd_tn_init(&a->au_tenants, t);
    return cd_tn_peer_token(secret, a->au_peer_token);
}

void cd_au_destroy(cd_auth_t *a)
{
    cd_tn_free_all(&a->au_tenants);
    free(a->au_tenants_path);
    a->au_tenants_path = NULL;
    if (a->au_keys != NULL) {
        OPENSSL_cleanse(a->au_keys, (size_t)CD_AU_KEY_SETS * CD_AU_KEY_WAYS * sizeof(*a->au_keys));
        free(a->au_keys);
        a->au_keys = NULL;
    }
    OPENSSL_cleanse(a->au_peer_token, sizeof(a->au_peer_token));
    pthread_mutex_destroy(&a->au_keys_lock);
}

st_status_t cd_au_reload(cd_auth_t *a)
{
    cd_tn_table_t *t = NULL;
    st_status_t status;

    if (!a->au_has_tenants) {
        return ST_ERR_UNSUPPORTED;
    }
    status = cd_tn_load(a->au_tenants_path, &t);
    if (status != ST_OK) {
        lg_warn("tenants_file not reloaded, the old table stays path=%s: %s", a->au_tenants_path,
                st_strerror(status));
        return status;
    }
    if (a->au_check != NULL) {
        status = a->au_check(a->au_check_arg, t->tt_n);
        if (status != ST_OK) {
            cd_tn_table_free(t);
            return status;
        }
    }
    cd_tn_swap(&a->au_tenants, t);
    lg_info("tenants reloaded tenants_file=%s tenants=%zu", a->au_tenants_path, t->tt_n);
    return ST_OK;
}

/* Compares two strings in time independent of where they differ. */
static int cd_au_equal(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);

    if (la != lb || lb == 0) {
        return 0;
    }
    return CRYPTO_memcmp(a, b, la) == 0;
}

static int cd_au_is_loopback(const char *peer)
{
    return strncmp(peer, "ipv4:127.", 9) == 0 || strncmp(peer, "ipv6:[::1]", 10) == 0 ||
           strncmp(peer, "unix:", 5) == 0;
}

static int cd_au_unhex(const char *s, uint8_t *out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned v;

        if (sscanf(s + 2 * i, "%2x", &v) != 1) {
            return 0;
        }
        out[i] = (uint8_t)v;
    }
    return s[2 * n] == '\0';
}

/* The slot set of a key. */
static cd_au_key_t *cd_au_set(cd_auth_t *a, const uint8_t *key)
{
    uint32_t h;

    memcpy(&h, key, sizeof(h));
    return &a->au_keys[(size_t)(h % CD_AU_KEY_SETS) * CD_AU_KEY_WAYS];
}

st_status_t cd_au_key_issue(cd_auth_t *a, const cd_principal_t *pr, uint64_t client, uint8_t *key)
{
    cd_au_key_t *set, *victim;

    if (getrandom(key, CD_AU_KEY_BYTES, 0) != CD_AU_KEY_BYTES) {
        lg_error("cannot draw a transport-call key: %s", strerror(errno));
        return ST_ERR_INTERNAL;
    }
    set = cd_au_set(a, key);
    pthread_mutex_lock(&a->au_keys_lock);
    victim = &set[0];
    for (int w = 1; w < CD_AU_KEY_WAYS; w++) {
        if (set[w].k_seq < victim->k_seq) {
            victim = &set[w]; /* a free slot (0) or the oldest key of the set */
        }
    }
    memcpy(victim->k_key, key, CD_AU_KEY_BYTES);
    victim->k_pr = *pr;
    victim->k_pr.pr_client = client;
    victim->k_seq = ++a->au_key_seq;
    pthread_mutex_unlock(&a->au_keys_lock);
    return ST_OK;
}

/* Finds the principal of a transport call's key (token: its hex). */
static st_status_t cd_au_key_find(cd_auth_t *a, const char *token, cd_principal_t *pr)
{
    uint8_t key[CD_AU_KEY_BYTES];
    cd_au_key_t *set;
    int found = 0;

    if (token == NULL || strlen(token) != 2 * CD_AU_KEY_BYTES ||
        !cd_au_unhex(token, key, CD_AU_KEY_BYTES)) {
        return ST_ERR_UNAUTHENTICATED;
    }
    set = cd_au_set(a, key);
    pthread_mutex_lock(&a->au_keys_lock);
    for (int w = 0; w < CD_AU_KEY_WAYS; w++) {
        if (set[w].k_seq != 0 && CRYPTO_memcmp(set[w].k_key, key, CD_AU_KEY_BYTES) == 0) {
            *pr = set[w].k_pr;
            found = 1;
        }
    }
    pthread_mutex_unlock(&a->au_keys_lock);
    OPENSSL_cleanse(key, sizeof(key));
    if (!found) {
        return ST_ERR_UNAUTHENTICATED;
    }
    if (pr->pr_kind == CD_PR_TENANT && atomic_load(&pr->pr_tenant->tn_removed)) {
        return ST_ERR_UNAUTHENTICATED; /* its tenant left the tenants file */
    }
    return ST_OK;
}

st_status_t cd_au_authenticate(cd_auth_t *a, const char *path, const char *token, const char *peer,
                               const char *identity, void *principal, char *msg, size_t msg_cap)
{
    cd_principal_t *pr = principal;
    const char *hello = srpc_cache_methods[SRPC_CACHE_HELLO].path;

    if (strcmp(peer, "transport") == 0) {
        if (cd_au_key_find(a, token, pr) != ST_OK) {
            snprintf(msg, msg_cap, "calls over the transport must present the key Hello gave");
            return ST_ERR_UNAUTHENTICATED;
        }
        return ST_OK;
    }
    if (token != NULL && cd_au_equal(token, a->au_peer_token)) {
        if (strcmp(path, srpc_cache_methods[SRPC_CACHE_LOOKUP].path) != 0 &&
            strcmp(path, srpc_cache_methods[SRPC_CACHE_REPLICATE].path) != 0 &&
            strcmp(path, srpc_cache_methods[SRPC_CACHE_DRAIN].path) != 0) {
            snprintf(msg, msg_cap,
                     "the cluster credential serves the peers' Lookup, Replicate and Drain "
                     "only, not %s",
                     path);
            return ST_ERR_PERMISSION;
        }
        pr->pr_kind = CD_PR_PEER;
        return ST_OK;
    }
    if (a->au_has_tenants) {
        const cd_tn_tenant_t *t, *by_cert = cd_tn_find_cert(&a->au_tenants, identity);

        if (token == NULL && by_cert != NULL) {
            pr->pr_kind = CD_PR_TENANT; /* the certificate names its tenant (cert=) */
            pr->pr_tenant = by_cert;
            return ST_OK;
        }
        if (token == NULL) {
            if (strcmp(path, hello) == 0) {
                return ST_OK; /* Hello may carry its token in the body (cd_h_hello checks) */
            }
            snprintf(msg, msg_cap,
                     "this node requires a tenant's token (authorization: Bearer <token>) or "
                     "a client certificate that the tenants file names (cert=)");
            return ST_ERR_UNAUTHENTICATED;
        }
        t = cd_tn_find_token(&a->au_tenants, token);
        if (t == NULL) {
            snprintf(msg, msg_cap, "token refused: it belongs to no tenant of this node");
            return ST_ERR_UNAUTHENTICATED;
        }
        if (by_cert != NULL && by_cert != t) {
            snprintf(msg, msg_cap,
                     "the token and the client certificate name different tenants (%s, %s)",
                     t->tn_name, by_cert->tn_name);
            return ST_ERR_PERMISSION;
        }
        pr->pr_kind = CD_PR_TENANT;
        pr->pr_tenant = t;
        return ST_OK;
    }
    if (a->au_token[0] != '\0') {
        if (token == NULL) {
            if (strcmp(path, hello) == 0) {
                return ST_OK;
            }
            snprintf(msg, msg_cap, "this node requires a token (authorization: Bearer <token>)");
            return ST_ERR_UNAUTHENTICATED;
        }
        if (!cd_au_equal(token, a->au_token)) {
            snprintf(msg, msg_cap, "token refused");
            return ST_ERR_UNAUTHENTICATED;
        }
        pr->pr_kind = CD_PR_ANY;
        return ST_OK;
    }
    if (a->au_protected && !cd_au_is_loopback(peer) && identity == NULL) {
        snprintf(msg, msg_cap,
                 "protected mode: no auth_token or tenants_file is configured, so "
                 "only loopback clients and clients with a verified certificate are served");
        return ST_ERR_PERMISSION;
    }
    pr->pr_kind = CD_PR_ANY;
    return ST_OK;
}

const cd_principal_t *cd_au_principal(srpc_ctx_t *ctx)
{
    static const cd_principal_t none = {CD_PR_NONE, NULL, 0};
    const cd_principal_t *pr = srpc_ctx_principal(ctx);

    return pr != NULL ? pr : &none;
}

uint64_t cd_au_client(srpc_ctx_t *ctx)
{
    const cd_principal_t *pr = cd_au_principal(ctx);
    char buf[32];
    uint64_t v;
    char *end;

    if (pr->pr_client != 0) {
        return pr->pr_client;
    }
    if (!srpc_ctx_metadata(ctx, "strata-client", buf, sizeof(buf)) || strlen(buf) != 16) {
        return 0;
    }
    v = strtoull(buf, &end, 16);
    return *end == '\0' ? v : 0;
}

int cd_au_may_tenant(const cd_principal_t *pr, const char *tenant)
{
    switch (pr->pr_kind) {
    case CD_PR_ANY:
    case CD_PR_PEER: return 1;
    case CD_PR_TENANT:
        return !atomic_load(&pr->pr_tenant->tn_removed) &&
               strcmp(pr->pr_tenant->tn_name, tenant) == 0;
    default: return 0;
    }
}
