/* tenants.c - see tenants.h. */
#include "tenants.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <openssl/evp.h>

static int tt_sha256_hex(const char *s, char out[65])
{
    unsigned char md[32];
    unsigned int n = 0;

    if (EVP_Digest(s, strlen(s), md, &n, EVP_sha256(), NULL) != 1 || n != 32) {
        return -1;
    }
    for (int i = 0; i < 32; i++) {
        snprintf(out + 2 * i, 3, "%02x", md[i]);
    }
    return 0;
}

int tt_token_hash(const char *token, char *out)
{
    memcpy(out, "sha256:", 7);
    return tt_sha256_hex(token, out + 7);
}

/* Whether `stratad --help` lists the setting (name, or its flag --name with dashes). */
static int tt_help_lists(const char *stratad, const char *name)
{
    char cmd[600], line[512], flag[128];
    int found = 0;
    FILE *p;

    snprintf(flag, sizeof(flag), "%s", name);
    for (char *c = flag; *c != '\0'; c++) {
        *c = *c == '_' ? '-' : *c;
    }

    snprintf(cmd, sizeof(cmd), "'%s' --help 2>&1", stratad);
    p = popen(cmd, "r");
    if (p == NULL) {
        return 0;
    }
    while (fgets(line, sizeof(line), p) != NULL) {
        found |= strstr(line, name) != NULL || strstr(line, flag) != NULL;
    }
    pclose(p);
    return found;
}

int tt_prepare(tt_set_t *s, const char *stratad, const char *const *names,
               const char *const *tokens, size_t n, const char *models)
{
    return tt_prepare_fields(s, stratad, names, tokens, NULL, n, models);
}

int tt_prepare_fields(tt_set_t *s, const char *stratad, const char *const *names,
                      const char *const *tokens, const char *const *fields, size_t n,
                      const char *models)
{
    memset(s, 0, sizeof(*s));
    if (n == 0 || n > TT_MAX) {
        fprintf(stderr, "tenants: %zu tenants (1..%d)\n", n, TT_MAX);
        return -1;
    }
    s->n = n;
    s->per_tenant = tt_help_lists(stratad, "tenants_file");
    for (size_t i = 0; i < n; i++) {
        s->t[i].name = names[i];
        s->t[i].token = s->per_tenant ? tokens[i] : tokens[0];
    }
    if (!s->per_tenant) {
        snprintf(s->flags, sizeof(s->flags), "--auth-token %s", tokens[0]);
        return 0;
    }
    snprintf(s->path, sizeof(s->path), "/tmp/strata-test-tenants-%d-%p", (int)getpid(), (void *)s);
    {
        FILE *f = fopen(s->path, "w");

        if (f == NULL) {
            fprintf(stderr, "tenants: cannot write %s: %s\n", s->path, strerror(errno));
            return -1;
        }
        for (size_t i = 0; i < n; i++) {
            char hash[TT_HASH_LEN];

            if (tt_token_hash(tokens[i], hash) != 0) {
                fclose(f);
                fprintf(stderr, "tenants: SHA-256 failed\n");
                return -1;
            }
            fprintf(f, "%s %s models=%s %s\n", names[i], hash, models,
                    fields != NULL && fields[i] != NULL ? fields[i] : "");
        }
        fclose(f);
    }
    snprintf(s->flags, sizeof(s->flags), "--tenants-file %s", s->path);
    if (n > 1 && tt_help_lists(stratad, "allow_shared_dataplane")) {
        snprintf(s->shared, sizeof(s->shared), "--allow-shared-dataplane");
    }
    return 0;
}

void tt_cleanup(tt_set_t *s)
{
    if (s->per_tenant && s->path[0] != '\0') {
        unlink(s->path);
    }
    s->path[0] = '\0';
}
