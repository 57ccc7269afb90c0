/*
 * cli_io.c - what every strata command shares below its own code: connecting
 * with the connection flags (cli_connect), the TLS files of `strata status`'s
 * own channels, reading --file and the token options, the progress bar.
 * It calls nothing of cli.c or the commands (cli.h's layering).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "cli.h"
#include "clock.h"
#include "config.h"
#include "log.h"

st_status_t cli_connect(const cli_conf_t *cf, st_client_t **c_p)
{
    st_client_params_t p = {0};
    st_status_t status;

    sc_options_params(&cf->conn, &p);
    status = st_client_connect(&p, c_p);
    if (status != ST_OK) {
        fprintf(stderr, "strata: cannot connect to %s: %s (%s)\n", cf->conn.nodes,
                st_client_last_error(), st_strerror(status));
    }
    return status;
}

st_status_t cli_tls_load(const cli_conf_t *cf, char *pem[3], srpc_channel_config_t *cc)
{
    const char *path[3] = {cf->conn.tls_ca, cf->conn.tls_cert, cf->conn.tls_key};
    static const char *const name[3] = {"--tls-ca", "--tls-cert", "--tls-key"};

    pem[0] = pem[1] = pem[2] = NULL;
    for (int i = 0; i < 3; i++) {
        if (path[i][0] != '\0' && srpc_pem_load(path[i], &pem[i]) != ST_OK) {
            fprintf(stderr, "strata: %s %s cannot be read\n", name[i], path[i]);
            cli_tls_free(pem);
            return ST_ERR_IO;
        }
    }
    cc->tls_ca_pem = pem[0];
    cc->tls_cert_pem = pem[1];
    cc->tls_key_pem = pem[2];
    return ST_OK;
}

void cli_tls_free(char *pem[3])
{
    for (int i = 0; i < 3; i++) {
        free(pem[i]);
        pem[i] = NULL;
    }
}

st_status_t cli_read_file(const char *path, char **text_p, size_t *len_p)
{
    FILE *f = fopen(path, "rb");
    char *text;
    long len;

    if (f == NULL || fseek(f, 0, SEEK_END) != 0 || (len = ftell(f)) < 0) {
        if (f != NULL) {
            fclose(f);
        }
        return ST_ERR_NOT_FOUND;
    }
    rewind(f);
    text = calloc(1, (size_t)len + 1);
    if (text == NULL || fread(text, 1, (size_t)len, f) != (size_t)len) {
        fclose(f);
        free(text);
        return ST_ERR_IO;
    }
    fclose(f);
    *text_p = text;
    *len_p = (size_t)len;
    return ST_OK;
}

st_status_t cli_read_tokens(const cli_conf_t *cf, uint32_t **tok_p, size_t *n_p)
{
    size_t cap = 1024, n = 0;
    uint32_t *tok;
    const char *src = cf->tokens;
    char *file_text = NULL;

    if (cf->random > 0) {
        tok = malloc(sizeof(*tok) * (size_t)cf->random);
        if (tok == NULL) {
            return ST_ERR_NOMEM;
        }
        for (int64_t i = 0; i < cf->random; i++) {
            tok[i] = (uint32_t)(XXH3_64bits_withSeed(&i, sizeof(i), (uint64_t)cf->seed) % 150000);
        }
        *tok_p = tok;
        *n_p = (size_t)cf->random;
        return ST_OK;
    }
    if (cf->tokens_file != NULL && cf->tokens_file[0] != '\0') {
        size_t len;

        if (cli_read_file(cf->tokens_file, &file_text, &len) != ST_OK) {
            fprintf(stderr, "strata: cannot read --tokens-file %s\n", cf->tokens_file);
            return ST_ERR_IO;
        }
        src = file_text;
    }
    if (src == NULL || src[0] == '\0') {
        fprintf(stderr, "strata: give the tokens with --tokens, --tokens-file or --random\n");
        return ST_ERR_INVALID;
    }
    tok = malloc(sizeof(*tok) * cap);
    if (tok == NULL) {
        free(file_text);
        return ST_ERR_NOMEM;
    }
    for (const char *p = src; *p != '\0';) {
        char *end;
        unsigned long long v;

        while (*p == ',' || *p == ' ' || *p == '\n' || *p == '\t' || *p == '\r') {
            p++;
        }
        if (*p == '\0') {
            break;
        }
        v = strtoull(p, &end, 10);
        if (end == p || v > UINT32_MAX) {
            fprintf(stderr, "strata: bad token id near '%.12s' (want 32-bit integers)\n", p);
            free(tok);
            free(file_text);
            return ST_ERR_INVALID;
        }
        if (n == cap) {
            uint32_t *bigger = realloc(tok, sizeof(*tok) * cap * 2);

            if (bigger == NULL) {
                free(tok);
                free(file_text);
                return ST_ERR_NOMEM;
            }
            tok = bigger;
            cap *= 2;
        }
        tok[n++] = (uint32_t)v;
        p = end;
    }
    free(file_text);
    *tok_p = tok;
    *n_p = n;
    return ST_OK;
}

void cli_progress(const char *what, uint64_t done, uint64_t total, uint64_t t0_ns)
{
    static uint64_t last;
    uint64_t now;
    int width = 30, filled;

    if (!isatty(STDERR_FILENO) || total == 0) {
        return;
    }
    now = cm_mono_ns();
    if (done < total && now - last < 100000000ull) {
        return;
    }
    last = now;
    filled = (int)((double)done / (double)total * width);
    fprintf(stderr, "\r%-10s [%.*s%*s] %3d%% %.1fs", what, filled, "##############################",
            width - filled, "", (int)(100.0 * (double)done / (double)total),
            (double)(now - t0_ns) / 1e9);
    if (done >= total) {
        fputc('\n', stderr);
    }
}

void cli_fill(uint8_t *buf, size_t len, const st_hash_t *h, int kind, int layer)
{
    uint64_t x = XXH3_64bits_withSeed(h->b, ST_HASH_BYTES, (uint64_t)(kind * 256 + layer));

    for (size_t i = 0; i + 8 <= len; i += 8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        memcpy(buf + i, &x, 8);
    }
    for (size_t i = len & ~(size_t)7; i < len; i++) {
        buf[i] = (uint8_t)(x >> (8 * (i & 7)));
    }
}
