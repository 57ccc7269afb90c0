/*
 * fuzz_config_files.c - mutated config files for test_fuzz_config (see
 * fuzz_config.c): files written from the table, mutated line by line, parsed
 * by the config parser and by the reference, the two compared.
 */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "daemon.h"
#include "fuzz_util.h"
#include "config.h"
#include "strata/strata.h"

#include "fuzz_config.h"

/* --------------------------------------------------------------- files -- */

void fzc_put(fzc_text_t *t, const char *s, size_t n)
{
    if (t->len + n + 1 > t->cap) {
        size_t cap = (t->len + n + 1) * 2;
        char *p = fz_alloc(cap);

        if (t->len > 0) {
            memcpy(p, t->p, t->len);
        }
        t->p = p;
        t->cap = cap;
    }
    if (n > 0) {
        memcpy(t->p + t->len, s, n);
    }
    t->len += n;
    t->p[t->len] = '\0';
}

void __attribute__((format(printf, 2, 3))) fzc_putf(fzc_text_t *t, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    fzc_put(t, buf, (size_t)n < sizeof(buf) ? (size_t)n : sizeof(buf) - 1);
}

/* A valid file of random options; e gets what it sets (the last line wins). */
static void fzc_valid_file(fz_rng_t *r, const cfg_table_t *t, fzc_text_t *f, fzc_expect_t *e)
{
    size_t n = 1 + fz_below(r, 8);

    memset(e, 0, sizeof(*e));
    if (fz_chance(r, 30)) {
        fzc_putf(f, "[%s]\n", t->program);
    }
    for (size_t k = 0; k < n; k++) {
        size_t i = fz_below(r, t->n_options);
        const cfg_option_t *o = &t->options[i];
        int64_t v = 0;
        char *text;

        if (o->flags & CFG_NOFILE) {
            continue;
        }
        text = fzc_valid(r, o, &v);
        if (fz_chance(r, 20)) {
            fzc_putf(f, "%s %s\n", fz_chance(r, 50) ? "#" : ";", "a comment");
        }
        if (fz_chance(r, 10)) {
            fzc_put(f, "\n", 1);
        }
        if (o->type == CFG_STRING && fz_chance(r, 20)) {
            fzc_putf(f, "%s = \"%s\"\n", o->name, text);
        } else {
            fzc_putf(f, fz_chance(r, 50) ? "%s = %s\n" : "%s=%s\n", o->name, text);
        }
        e->set[i] = 1;
        e->v[i] = v;
        e->s[i] = text;
    }
}

/* What the parser must refuse, found in the raw bytes: a NUL, a line longer
 * than FZC_LINE bytes, a line that starts with white space and holds more
 * than a comment. Returns a description, or NULL. */
const char *fzc_must_refuse(const char *p, size_t len)
{
    size_t start = 0;

    if (memchr(p, '\0', len) != NULL) {
        G.nuls++;
        return "a NUL byte";
    }
    while (start < len) {
        const char *nl = memchr(p + start, '\n', len - start);
        size_t end = nl ? (size_t)(nl - p) : len, i = start;

        if (end - start > FZC_LINE) {
            G.long_lines++;
            return "a line longer than the parser's buffer";
        }
        if (end > start && isspace((unsigned char)p[start])) {
            while (i < end && isspace((unsigned char)p[i])) {
                i++;
            }
            if (i < end && p[i] != ';' && p[i] != '#') {
                G.indented++;
                return "an indented line (a continuation)";
            }
        }
        start = end + 1;
    }
    return NULL;
}

/* The name of the table's first string option. */
static const char *fzc_first_string(const cfg_table_t *t)
{
    for (size_t i = 0; i < t->n_options; i++) {
        if (t->options[i].type == CFG_STRING) {
            return t->options[i].name;
        }
    }
    return "x";
}

/* Applies 1-3 mutations to a file's text. */
void fzc_mutate_file(fz_rng_t *r, const cfg_table_t *t, fzc_text_t *f)
{
    unsigned n = 1 + (unsigned)fz_below(r, 3);

    for (unsigned k = 0; k < n; k++) {
        const cfg_option_t *o = &t->options[fz_below(r, t->n_options)];
        fzc_text_t g = {0};
        size_t at = fz_below(r, f->len + 1), len;

        /* Most mutations add a line at a line start. */
        while (at > 0 && f->p[at - 1] != '\n') {
            at--;
        }
        fzc_put(&g, f->p, at);
        switch (fz_below(r, 12)) {
        case 0: { /* bytes */
            uint8_t *b = fz_mutate_bytes(r, (const uint8_t *)f->p, f->len, &len, &G.log);

            g.len = 0;
            fzc_put(&g, (const char *)b, len);
            at = f->len;
            break;
        }
        case 1: { /* a long line: a long value, or a value with a setting at its tail */
            size_t L = 150 + fz_below(r, 400);
            char *v = fz_alloc(L + 1);

            memset(v, 'a' + (int)fz_below(r, 26), L);
            v[L] = '\0';
            if (fz_chance(r, 50)) {
                fzc_putf(&g, "%s = ", o->name);
                fzc_put(&g, v, L);
                fzc_put(&g, "\n", 1);
            } else {
                /* The first 199 bytes fill the INI parser's buffer; what
                 * follows looks like a line of its own. */
                const char *key = fzc_first_string(t);
                size_t head = strlen(key) + 3, fill = 199 - head - fz_below(r, 3);
                char *pad = fz_alloc(fill + 1);

                memset(pad, 'b', fill);
                fzc_putf(&g, "%s = ", key);
                fzc_put(&g, pad, fill);
                fzc_putf(&g, "%s = %s\n", o->name, fzc_junk(r));
            }
            fz_logf(&G.log, "long line");
            break;
        }
        case 2:
            fzc_putf(&g, "%s %s\n", o->name, fzc_junk(r));
            fz_logf(&G.log, "no '='");
            break;
        case 3:
            fzc_putf(&g, "no_such_key_%u = 1\n", (unsigned)fz_below(r, 100));
            fz_logf(&G.log, "unknown key");
            break;
        case 4:
            fzc_putf(&g, "%s = %s\n", o->name, fzc_junk(r));
            fz_logf(&G.log, "junk value for %s", o->name);
            break;
        case 5: { /* a NUL inside a line */
            const char line[] = "listen = 127.0.0.1:9\0junk = 1\n";

            fzc_put(&g, line, sizeof(line) - 1);
            fz_logf(&G.log, "NUL byte");
            break;
        }
        case 6: { /* an indented line */
            int64_t v;

            fzc_putf(&g, "%s%s = %s\n", fz_chance(r, 50) ? "  " : "\t", o->name,
                     fzc_valid(r, o, &v));
            fz_logf(&G.log, "indented line");
            break;
        }
        case 7:
            fzc_putf(&g, "[%s]\n", fz_chance(r, 50) ? "other" : "stratad ");
            fz_logf(&G.log, "section");
            break;
        case 8: { /* CRLF line ends */
            g.len = 0;
            for (size_t i = 0; i < f->len; i++) {
                fzc_put(&g, f->p[i] == '\n' ? "\r\n" : f->p + i, f->p[i] == '\n' ? 2 : 1);
            }
            at = f->len;
            fz_logf(&G.log, "CRLF");
            break;
        }
        case 9:
            fzc_put(&g, "\xef\xbb\xbf", at == 0 ? 3 : 0);
            fz_logf(&G.log, "BOM");
            break;
        case 10:
            fzc_put(&g, "[stratad\n", 9);
            fz_logf(&G.log, "bad section");
            break;
        default: {
            int64_t v;

            fzc_putf(&g, "%s : %s\n", o->name, fzc_valid(r, o, &v));
            fz_logf(&G.log, "':' separator");
            break;
        }
        }
        fzc_put(&g, f->p + at, f->len - at);
        *f = g;
    }
}

void fzc_write(const char *text, size_t len)
{
    FILE *f = fopen(G.path, "wb");

    FZC_CHECK(f != NULL && fwrite(text, 1, len, f) == len, "cannot write %s", G.path);
    fclose(f);
}

/* Checks the values a valid file (or flag list) set. */
void fzc_check_expect(const cfg_table_t *t, const void *conf, const fzc_expect_t *e)
{
    for (size_t i = 0; i < t->n_options; i++) {
        const cfg_option_t *o = &t->options[i];
        const char *p = (const char *)conf + o->offset;

        if (!e->set[i]) {
            continue;
        }
        if (o->type == CFG_STRING) {
            FZC_CHECK(strcmp(*(char *const *)(const void *)p, e->s[i]) == 0,
                      "%s: %s is '%s', the input says '%s'", t->program, o->name,
                      *(char *const *)(const void *)p, e->s[i]);
        } else {
            int64_t got = o->type == CFG_BOOL || o->type == CFG_ENUM ? *(const int *)(const void *)p
                                                                     : fzc_num(o, conf);

            FZC_CHECK(got == e->v[i], "%s: %s is %lld, the input says %lld", t->program, o->name,
                      (long long)got, (long long)e->v[i]);
        }
    }
}

void fzc_file(fz_rng_t *r, const cfg_table_t *t)
{
    fzc_text_t f = {0};
    fzc_expect_t e;
    fzc_any_t c;
    char err[512] = "";
    int mutated = fz_chance(r, 75);
    const char *refuse;
    st_status_t st;

    fz_log_clear(&G.log);
    G.what = "file";
    fzc_put(&f, "", 0);
    fzc_valid_file(r, t, &f, &e);
    if (mutated) {
        fzc_mutate_file(r, t, &f);
    }
    G.input = f.p;
    G.input_len = f.len;
    refuse = fzc_must_refuse(f.p, f.len);
    fzc_write(f.p, f.len);
    fzc_defaults(t, &c);
    st = cfg_load_file(t, &c, G.path, err, sizeof(err));
    G.files++;
    G.files_ok += st == ST_OK;
    FZC_CHECK(st == ST_OK || st == ST_ERR_INVALID || st == ST_ERR_NOT_FOUND,
              "%s: file returned %s (%s)", t->program, st_status_name(st), err);
    if (st != ST_OK) {
        FZC_CHECK(strncmp(err, G.path, strlen(G.path)) == 0 && err[strlen(G.path)] == ':' &&
                      strlen(err) > strlen(G.path) + 3,
                  "%s: the error does not start with the file and line: '%s'", t->program, err);
    } else {
        FZC_CHECK(refuse == NULL, "%s: a file with %s parsed OK", t->program, refuse);
        fzc_check_bounds(t, &c);
    }
    if (!mutated) {
        FZC_CHECK(st == ST_OK, "%s: a valid file was refused: %s", t->program, err);
        fzc_check_expect(t, &c, &e);
    }
    cfg_free(t, &c);
}
