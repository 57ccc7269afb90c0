/*
 * tenants.c - the tenants file, token lookup by SHA-256, the cluster
 * credential and secrets read from files or the environment (tenants.h).
 */
#include "tenants.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "config.h"
#include "log.h"

/* ------------------------------------------------------------- hashing -- */

static st_status_t cd_tn_sha256(const void *data, size_t len, uint8_t *out)
{
    unsigned int n = 0;

    if (EVP_Digest(data, len, out, &n, EVP_sha256(), NULL) != 1 || n != CD_TN_HASH_BYTES) {
        lg_error("tenants: SHA-256 failed in OpenSSL");
        return ST_ERR_INTERNAL;
    }
    return ST_OK;
}

st_status_t cd_tn_hmac(const void *key, size_t key_len, const void *msg, size_t msg_len,
                       uint8_t *out)
{
    unsigned int n = 0;

    if (HMAC(EVP_sha256(), key, (int)key_len, msg, msg_len, out, &n) == NULL ||
        n != CD_TN_HASH_BYTES) {
        lg_error("tenants: HMAC-SHA-256 failed in OpenSSL");
        return ST_ERR_INTERNAL;
    }
    return ST_OK;
}

st_status_t cd_tn_peer_token(const char *secret, char *out)
{
    static const char label[] = "strata-peer-v1";
    uint8_t mac[CD_TN_HASH_BYTES];
    st_status_t status = cd_tn_hmac(secret, strlen(secret), label, sizeof(label) - 1, mac);

    if (status != ST_OK) {
        return status;
    }
    for (size_t i = 0; i < sizeof(mac); i++) {
        snprintf(out + 2 * i, 3, "%02x", mac[i]);
    }
    OPENSSL_cleanse(mac, sizeof(mac));
    return ST_OK;
}

/* ------------------------------------------------------------- parsing -- */

static int cd_tn_hex(int c)
{
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    c = tolower(c);
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

static void cd_tn_tenant_free(cd_tn_tenant_t *t)
{
    for (size_t i = 0; i < t->tn_n_models; i++) {
        free(t->tn_models[i]);
    }
    free(t);
}

void cd_tn_table_free(cd_tn_table_t *t)
{
    if (t == NULL) {
        return;
    }
    for (size_t i = 0; i < t->tt_n; i++) {
        cd_tn_tenant_free(t->tt_tenants[i]);
    }
    free(t->tt_tenants);
    free(t);
}

/* Parses models=a,b into t. */
static st_status_t cd_tn_parse_models(cd_tn_tenant_t *t, const char *list, char *why, size_t cap)
{
    char *copy = strdup(list), *save = NULL, *m;

    if (copy == NULL) {
        return ST_ERR_NOMEM;
    }
    for (m = strtok_r(copy, ",", &save); m != NULL; m = strtok_r(NULL, ",", &save)) {
        if (t->tn_n_models == CD_TN_MAX_MODELS || strlen(m) > CD_NAME_MAX) {
            snprintf(why, cap, "models: at most %d names of at most %d bytes", CD_TN_MAX_MODELS,
                     CD_NAME_MAX);
            free(copy);
            return ST_ERR_INVALID;
        }
        t->tn_models[t->tn_n_models] = strdup(m);
        if (t->tn_models[t->tn_n_models] == NULL) {
            free(copy);
            return ST_ERR_NOMEM;
        }
        t->tn_n_models++;
    }
    free(copy);
    if (t->tn_n_models == 0) {
        snprintf(why, cap, "models= names no model (leave it out to allow any)");
        return ST_ERR_INVALID;
    }
    return ST_OK;
}

/* Parses one field key=value of a tenant line. */
static st_status_t cd_tn_parse_field(cd_tn_tenant_t *t, char *field, char *why, size_t cap)
{
    static const struct {
        const char *key;
        size_t off;
        int is_size;
    } quotas[] = {
        {"memory", offsetof(cd_tn_quota_t, memory), 1},
        {"ssd", offsetof(cd_tn_quota_t, ssd), 1},
        {"sessions", offsetof(cd_tn_quota_t, sessions), 0},
        {"pins", offsetof(cd_tn_quota_t, pins), 0},
        {"namespaces", offsetof(cd_tn_quota_t, namespaces), 0},
        {"leases", offsetof(cd_tn_quota_t, leases), 0},
        {"reservations", offsetof(cd_tn_quota_t, reservations), 0},
    };
    char *eq = strchr(field, '=');

    if (eq == NULL) {
        snprintf(why, cap, "field '%.64s' is not key=value", field);
        return ST_ERR_INVALID;
    }
    *eq = '\0';
    if (strcmp(field, "models") == 0) {
        return cd_tn_parse_models(t, eq + 1, why, cap);
    }
    if (strcmp(field, "cert") == 0) {
        size_t len = strlen(eq + 1);

        if (len == 0 || len > CD_TN_CERT_MAX) {
            snprintf(why, cap, "cert= names the subject CN of a client certificate: 1..%d bytes",
                     CD_TN_CERT_MAX);
            return ST_ERR_INVALID;
        }
        memcpy(t->tn_cert, eq + 1, len + 1);
        return ST_OK;
    }
    for (size_t i = 0; i < sizeof(quotas) / sizeof(quotas[0]); i++) {
        uint64_t v;
        char *end;

        if (strcmp(field, quotas[i].key) != 0) {
            continue;
        }
        if (quotas[i].is_size) {
            if (cfg_parse_size(eq + 1, &v) != ST_OK) {
                snprintf(why, cap, "%s=%.64s is not a size (like 64G)", field, eq + 1);
                return ST_ERR_INVALID;
            }
        } else {
            errno = 0;
            v = strtoull(eq + 1, &end, 10);
            if (errno != 0 || end == eq + 1 || *end != '\0' || eq[1] == '-') {
                snprintf(why, cap, "%s=%.64s is not a count", field, eq + 1);
                return ST_ERR_INVALID;
            }
        }
        *(uint64_t *)(void *)((char *)&t->tn_quota + quotas[i].off) = v;
        return ST_OK;
    }
    snprintf(why, cap,
             "unknown field '%.64s' (models, cert, memory, ssd, sessions, pins, namespaces, "
             "leases, reservations)",
             field);
    return ST_ERR_INVALID;
}

/* Parses one non-empty line into a tenant. */
static st_status_t cd_tn_parse_line(char *line, cd_tn_tenant_t **t_p, char *why, size_t cap)
{
    static const char pfx[] = "sha256:";
    char *save = NULL, *name, *hash, *field;
    cd_tn_tenant_t *t;
    st_status_t status = ST_OK;

    name = strtok_r(line, " \t", &save);
    hash = strtok_r(NULL, " \t", &save);
    if (hash == NULL) {
        snprintf(why, cap, "want 'name sha256:<64 hex> [key=value ...]'");
        return ST_ERR_INVALID;
    }
    if (strlen(name) > CD_NAME_MAX) {
        snprintf(why, cap, "tenant name longer than %d bytes", CD_NAME_MAX);
        return ST_ERR_INVALID;
    }
    if (strncmp(hash, pfx, sizeof(pfx) - 1) != 0 ||
        strlen(hash) != sizeof(pfx) - 1 + 2 * CD_TN_HASH_BYTES) {
        snprintf(why, cap, "tenant %.64s: the token hash must be sha256:<64 hex digits>", name);
        return ST_ERR_INVALID;
    }
    t = calloc(1, sizeof(*t));
    if (t == NULL) {
        return ST_ERR_NOMEM;
    }
    snprintf(t->tn_name, sizeof(t->tn_name), "%s", name);
    t->tn_quota.namespaces = CD_TN_DEFAULT_NAMESPACES;
    hash += sizeof(pfx) - 1;
    for (size_t i = 0; i < CD_TN_HASH_BYTES; i++) {
        int hi = cd_tn_hex(hash[2 * i]), lo = cd_tn_hex(hash[2 * i + 1]);

        if (hi < 0 || lo < 0) {
            snprintf(why, cap, "tenant %.64s: the token hash has a non-hex digit", name);
            cd_tn_tenant_free(t);
            return ST_ERR_INVALID;
        }
        t->tn_hash[i] = (uint8_t)(hi << 4 | lo);
    }
    while (status == ST_OK && (field = strtok_r(NULL, " \t", &save)) != NULL) {
        status = cd_tn_parse_field(t, field, why, cap);
    }
    if (status != ST_OK) {
        cd_tn_tenant_free(t);
        return status;
    }
    *t_p = t;
    return ST_OK;
}

st_status_t cd_tn_load(const char *path, cd_tn_table_t **table_p)
{
    FILE *f = fopen(path, "r");
    cd_tn_table_t *tab;
    char line[4096], why[256];
    size_t cap = 0;
    unsigned lineno = 0;
    st_status_t status = ST_OK;

    if (f == NULL) {
        lg_error("cannot read tenants_file path=%s: %s", path, strerror(errno));
        return ST_ERR_IO;
    }
    tab = calloc(1, sizeof(*tab));
    if (tab == NULL) {
        fclose(f);
        return ST_ERR_NOMEM;
    }
    while (status == ST_OK && fgets(line, sizeof(line), f) != NULL) {
        char *p = line, *hash = strchr(line, '#');
        cd_tn_tenant_t *t = NULL;

        lineno++;
        if (strchr(line, '\n') == NULL && !feof(f)) {
            lg_error("tenants_file %s:%u: line longer than %zu bytes", path, lineno,
                     sizeof(line) - 1);
            status = ST_ERR_INVALID;
            break;
        }
        if (hash != NULL) {
            *hash = '\0';
        }
        line[strcspn(line, "\r\n")] = '\0';
        while (*p == ' ' || *p == '\t') {
            p++;
        }
        if (*p == '\0') {
            continue;
        }
        why[0] = '\0';
        status = cd_tn_parse_line(p, &t, why, sizeof(why));
        if (status == ST_ERR_INVALID) {
            lg_error("tenants_file %s:%u: %s", path, lineno, why);
            break;
        }
        if (status != ST_OK) {
            break;
        }
        for (size_t i = 0; i < tab->tt_n; i++) {
            if (strcmp(tab->tt_tenants[i]->tn_name, t->tn_name) == 0) {
                lg_error("tenants_file %s:%u: tenant %s is named twice", path, lineno, t->tn_name);
                status = ST_ERR_INVALID;
            } else if (CRYPTO_memcmp(tab->tt_tenants[i]->tn_hash, t->tn_hash, CD_TN_HASH_BYTES) ==
                       0) {
                lg_error("tenants_file %s:%u: tenant %s has the token hash of tenant %s (a token "
                         "authenticates one tenant)",
                         path, lineno, t->tn_name, tab->tt_tenants[i]->tn_name);
                status = ST_ERR_INVALID;
            } else if (t->tn_cert[0] != '\0' &&
                       strcmp(tab->tt_tenants[i]->tn_cert, t->tn_cert) == 0) {
                lg_error("tenants_file %s:%u: tenant %s has the cert= of tenant %s (a certificate "
                         "authenticates one tenant)",
                         path, lineno, t->tn_name, tab->tt_tenants[i]->tn_name);
                status = ST_ERR_INVALID;
            }
            if (status != ST_OK) {
                break;
            }
        }
        if (status == ST_OK && tab->tt_n == cap) {
            size_t ncap = cap ? 2 * cap : 16;
            cd_tn_tenant_t **n = realloc(tab->tt_tenants, ncap * sizeof(*n));

            if (n == NULL) {
                status = ST_ERR_NOMEM;
            } else {
                tab->tt_tenants = n;
                cap = ncap;
            }
        }
        if (status != ST_OK) {
            cd_tn_tenant_free(t);
            break;
        }
        tab->tt_tenants[tab->tt_n++] = t;
    }
    if (status == ST_OK && ferror(f)) {
        lg_error("cannot read tenants_file path=%s: %s", path, strerror(errno));
        status = ST_ERR_IO;
    }
    fclose(f);
    if (status != ST_OK) {
        cd_tn_table_free(tab);
        return status;
    }
    *table_p = tab;
    return ST_OK;
}

/* ------------------------------------------------------------- tables -- */

static void cd_tn_adopt(cd_tenants_t *tns, cd_tn_table_t *t)
{
    for (size_t i = 0; t != NULL && i < t->tt_n; i++) {
        t->tt_tenants[i]->tn_all_next = tns->tns_all;
        tns->tns_all = t->tt_tenants[i];
    }
}

void cd_tn_init(cd_tenants_t *tns, cd_tn_table_t *t)
{
    memset(tns, 0, sizeof(*tns));
    pthread_mutex_init(&tns->tns_lock, NULL);
    cd_tn_adopt(tns, t);
    atomic_store(&tns->tns_cur, t);
}

void cd_tn_swap(cd_tenants_t *tns, cd_tn_table_t *t)
{
    cd_tn_table_t *old;

    pthread_mutex_lock(&tns->tns_lock);
    old = atomic_load(&tns->tns_cur);
    cd_tn_adopt(tns, t);
    for (size_t i = 0; old != NULL && i < old->tt_n; i++) {
        int kept = 0;

        /* Kept: the same name with the same token and cert=. A new token (or certificate
         * name) revokes the old one, and with it the transport keys its Hellos drew. */
        for (size_t j = 0; t != NULL && j < t->tt_n; j++) {
            kept |= strcmp(old->tt_tenants[i]->tn_name, t->tt_tenants[j]->tn_name) == 0 &&
                    CRYPTO_memcmp(old->tt_tenants[i]->tn_hash, t->tt_tenants[j]->tn_hash,
                                  CD_TN_HASH_BYTES) == 0 &&
                    strcmp(old->tt_tenants[i]->tn_cert, t->tt_tenants[j]->tn_cert) == 0;
        }
        if (!kept) {
            atomic_store(&old->tt_tenants[i]->tn_removed, 1);
        }
    }
    if (t != NULL) {
        t->tt_older = old;
    }
    atomic_store(&tns->tns_cur, t);
    pthread_mutex_unlock(&tns->tns_lock);
}

void cd_tn_free_all(cd_tenants_t *tns)
{
    cd_tn_table_t *t = atomic_load(&tns->tns_cur);
    cd_tn_tenant_t *a = tns->tns_all;

    while (t != NULL) {
        cd_tn_table_t *older = t->tt_older;

        free(t->tt_tenants);
        free(t);
        t = older;
    }
    while (a != NULL) {
        cd_tn_tenant_t *next = a->tn_all_next;

        cd_tn_tenant_free(a);
        a = next;
    }
    atomic_store(&tns->tns_cur, NULL);
    tns->tns_all = NULL;
    pthread_mutex_destroy(&tns->tns_lock);
}

const cd_tn_table_t *cd_tn_current(const cd_tenants_t *tns)
{
    return atomic_load(&((cd_tenants_t *)tns)->tns_cur);
}

const cd_tn_tenant_t *cd_tn_find_token(const cd_tenants_t *tns, const char *token)
{
    const cd_tn_table_t *t = cd_tn_current(tns);
    const cd_tn_tenant_t *found = NULL;
    uint8_t h[CD_TN_HASH_BYTES];

    if (t == NULL || token == NULL || cd_tn_sha256(token, strlen(token), h) != ST_OK) {
        return NULL;
    }
    for (size_t i = 0; i < t->tt_n; i++) {
        /* Every tenant is compared: the time does not tell which one matched. */
        if (CRYPTO_memcmp(t->tt_tenants[i]->tn_hash, h, sizeof(h)) == 0) {
            found = t->tt_tenants[i];
        }
    }
    return found;
}

const cd_tn_tenant_t *cd_tn_find_name(const cd_tenants_t *tns, const char *name)
{
    const cd_tn_table_t *t = cd_tn_current(tns);

    for (size_t i = 0; t != NULL && i < t->tt_n; i++) {
        if (strcmp(t->tt_tenants[i]->tn_name, name) == 0) {
            return t->tt_tenants[i];
        }
    }
    return NULL;
}

const cd_tn_tenant_t *cd_tn_find_cert(const cd_tenants_t *tns, const char *cn)
{
    const cd_tn_table_t *t = cd_tn_current(tns);

    for (size_t i = 0; cn != NULL && t != NULL && i < t->tt_n; i++) {
        if (t->tt_tenants[i]->tn_cert[0] != '\0' && strcmp(t->tt_tenants[i]->tn_cert, cn) == 0) {
            return t->tt_tenants[i];
        }
    }
    return NULL;
}

int cd_tn_model_allowed(const cd_tn_tenant_t *t, const char *model)
{
    if (t->tn_n_models == 0) {
        return 1;
    }
    for (size_t i = 0; i < t->tn_n_models; i++) {
        if (strcmp(t->tn_models[i], model) == 0) {
            return 1;
        }
    }
    return 0;
}

const cd_tn_quota_t *cd_tn_quota(const cd_tn_tenant_t *t)
{
    return &t->tn_quota;
}

void cd_tn_foreach(cd_tenants_t *tns, void (*fn)(void *arg, const cd_tn_tenant_t *t), void *arg)
{
    const cd_tn_table_t *t;

    pthread_mutex_lock(&tns->tns_lock);
    t = atomic_load(&tns->tns_cur);
    for (size_t i = 0; t != NULL && i < t->tt_n; i++) {
        fn(arg, t->tt_tenants[i]);
    }
    pthread_mutex_unlock(&tns->tns_lock);
}

/* ------------------------------------------------------------- secrets -- */

st_status_t cd_tn_read_secret(char **value, const char *path, const char *env, const char *name)
{
    char buf[4096];
    const char *src = NULL;
    char *copy;

    if (path != NULL && path[0] != '\0') {
        FILE *f;

        if (*value != NULL && (*value)[0] != '\0') {
            lg_error("%s and %s_file are both set: set one", name, name);
            return ST_ERR_INVALID;
        }
        f = fopen(path, "r");
        if (f == NULL) {
            lg_error("cannot read %s_file path=%s: %s", name, path, strerror(errno));
            return ST_ERR_IO;
        }
        if (fgets(buf, sizeof(buf), f) == NULL) {
            buf[0] = '\0';
        }
        fclose(f);
        buf[strcspn(buf, "\r\n")] = '\0';
        if (buf[0] == '\0') {
            lg_error("%s_file path=%s is empty", name, path);
            return ST_ERR_INVALID;
        }
        src = buf;
    } else if ((*value == NULL || (*value)[0] == '\0') && env != NULL && getenv(env) != NULL &&
               getenv(env)[0] != '\0') {
        src = getenv(env);
    }
    if (src == NULL) {
        return ST_OK;
    }
    copy = strdup(src);
    OPENSSL_cleanse(buf, sizeof(buf));
    if (copy == NULL) {
        return ST_ERR_NOMEM;
    }
    free(*value);
    *value = copy;
    return ST_OK;
}
