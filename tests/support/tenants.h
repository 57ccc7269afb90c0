/*
 * tenants.h - daemon flags that give tests several tenants with a token
 * each: when stratad takes a tenants file (its --help lists tenants_file), a
 * file with one line per tenant (name, sha256:<hex of the token>, models);
 * otherwise the one auth_token, which every tenant then presents (the
 * embedded one-tenant default, before per-tenant tokens).
 */
#ifndef STRATA_TEST_TENANTS_H
#define STRATA_TEST_TENANTS_H

#include <stddef.h>

#define TT_MAX 8

typedef struct tt_tenant {
    const char *name;
    const char *token; /* the token to present: the tenant's own, or the shared one */
} tt_tenant_t;

typedef struct tt_set {
    int per_tenant; /* 1: a tenants file gives each tenant its own token */
    char path[64];  /* the tenants file, when per_tenant */
    char flags[160];
    /* "--allow-shared-dataplane" when several tenants share a tenants file and
     * stratad has the setting, else "": what a test that runs them over UCX
     * (whose keys isolate nothing) must add to flags to start at all. */
    char shared[32];
    tt_tenant_t t[TT_MAX];
    size_t n;
} tt_set_t;

/*
 * Prepares flags (s->flags, to append to the daemon's command line) for the
 * n tenants names[i] with tokens[i], allowed the model `models` ("m1,m2").
 * Without tenants-file support s->t[i].token is tokens[0] for every tenant,
 * and the flags are "--auth-token <tokens[0]>". s->shared: see tt_set_t.
 * Returns 0, or -1 with the reason on stderr.
 */
int tt_prepare(tt_set_t *s, const char *stratad, const char *const *names,
               const char *const *tokens, size_t n, const char *models);

/*
 * tt_prepare with more fields of each tenant's line: fields[i] (NULL, or
 * fields[i] NULL: none), for example "memory=16M pins=16 namespaces=2".
 * Without tenants-file support the fields are dropped.
 */
int tt_prepare_fields(tt_set_t *s, const char *stratad, const char *const *names,
                      const char *const *tokens, const char *const *fields, size_t n,
                      const char *models);

/* The "sha256:<64 hex digits>" of token, as a tenants file holds it, into
 * out (at least TT_HASH_LEN bytes). Returns 0, or -1 when hashing fails. */
#define TT_HASH_LEN 72
int tt_token_hash(const char *token, char *out);

/* Removes the tenants file, if any. */
void tt_cleanup(tt_set_t *s);

#endif
