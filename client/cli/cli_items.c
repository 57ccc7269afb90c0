/*
 * cli_items.c - the items of `strata hash/put/get`: see cli_items.h.
 */
#include "cli_items.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "image.h"

/* Writes a reason into why and returns status. */
static st_status_t __attribute__((format(printf, 4, 5)))
cli_why(st_status_t status, char *why, size_t why_len, const char *fmt, ...)
{
    va_list ap;

    if (why_len > 0) {
        va_start(ap, fmt);
        vsnprintf(why, why_len, fmt, ap);
        va_end(ap);
    }
    return status;
}

/* A decimal integer filling s[0..n) exactly, at most max. */
static int cli_uint(const char *s, size_t n, uint64_t max, uint64_t *v_p)
{
    uint64_t v = 0;

    if (n == 0 || n > 20) {
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        if (!isdigit((unsigned char)s[i]) || v > (max - (uint64_t)(s[i] - '0')) / 10) {
            return 0;
        }
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    *v_p = v;
    return 1;
}

/* The "@POS[:LEN]" tail at s (or none when s is NULL) into spec. */
static st_status_t cli_item_pos(const char *arg, const char *at, int need_pos,
                                cli_item_spec_t *spec, char *why, size_t why_len)
{
    const char *colon;
    uint64_t v;

    if (at == NULL) {
        if (need_pos) {
            return cli_why(ST_ERR_INVALID, why, why_len,
                           "'%s': give the item's token position as @POS", arg);
        }
        return ST_OK;
    }
    colon = strchr(at + 1, ':');
    if (!cli_uint(at + 1, colon ? (size_t)(colon - at - 1) : strlen(at + 1), INT32_MAX * 2ull,
                  &v)) {
        return cli_why(ST_ERR_INVALID, why, why_len,
                       "'%s': the position after '@' is not a token index", arg);
    }
    spec->has_pos = 1;
    spec->start = v;
    if (colon != NULL) {
        if (!cli_uint(colon + 1, strlen(colon + 1), 1ull << 40, &v) || v == 0) {
            return cli_why(ST_ERR_INVALID, why, why_len,
                           "'%s': the length after ':' is not a token count above 0", arg);
        }
        spec->n_tokens = v;
    }
    return ST_OK;
}

st_status_t cli_item_parse_image(const char *arg, int need_pos, cli_item_spec_t *out, char *why,
                                 size_t why_len)
{
    cli_item_spec_t spec = {0};
    const char *at = strrchr(arg, '@');
    size_t plen = at ? (size_t)(at - arg) : strlen(arg);
    st_status_t st;

    if (plen == 0) {
        return cli_why(ST_ERR_INVALID, why, why_len, "'%s': no image file before '@'", arg);
    }
    if (plen >= CLI_PATH_MAX) {
        return cli_why(ST_ERR_INVALID, why, why_len, "'%.40s...': the path is longer than %d", arg,
                       CLI_PATH_MAX - 1);
    }
    spec.src = CLI_ITEM_FILE;
    memcpy(spec.path, arg, plen);
    st = cli_item_pos(arg, at, need_pos, &spec, why, why_len);
    if (st == ST_OK) {
        *out = spec;
    }
    return st;
}

/* W,H,SEED[,C] in s[0..n) into spec. */
static st_status_t cli_item_gen_size(const char *arg, const char *s, size_t n,
                                     cli_item_spec_t *spec, char *why, size_t why_len)
{
    uint64_t v[4] = {0, 0, 0, CLI_IMAGE_C_DEF};
    size_t k = 0, from = 0;

    for (size_t i = 0; i <= n; i++) {
        if (i < n && s[i] != ',') {
            continue;
        }
        if (k == 4 || !cli_uint(s + from, i - from, UINT64_MAX, &v[k])) {
            k = 0;
            break;
        }
        k++;
        from = i + 1;
    }
    if (k < 3) {
        return cli_why(ST_ERR_INVALID, why, why_len,
                       "'%s': expected W,H,SEED or W,H,SEED,C (decimal integers)", arg);
    }
    if (v[0] == 0 || v[1] == 0 || v[0] > ST_IMAGE_SIDE_MAX || v[1] > ST_IMAGE_SIDE_MAX) {
        return cli_why(ST_ERR_INVALID, why, why_len, "'%s': sides are 1..%d", arg,
                       ST_IMAGE_SIDE_MAX);
    }
    if (v[3] != 1 && v[3] != 3) {
        return cli_why(ST_ERR_INVALID, why, why_len, "'%s': channels C are 1 or 3", arg);
    }
    spec->width = (uint32_t)v[0];
    spec->height = (uint32_t)v[1];
    spec->seed = v[2];
    spec->channels = (uint32_t)v[3];
    return ST_OK;
}

st_status_t cli_item_parse_gen(const char *arg, int need_pos, cli_item_spec_t *out, char *why,
                               size_t why_len)
{
    cli_item_spec_t spec = {0};
    const char *at = strchr(arg, '@');
    st_status_t st;

    spec.src = CLI_ITEM_GEN;
    st = cli_item_gen_size(arg, arg, at ? (size_t)(at - arg) : strlen(arg), &spec, why, why_len);
    if (st == ST_OK) {
        st = cli_item_pos(arg, at, need_pos, &spec, why, why_len);
    }
    if (st == ST_OK) {
        *out = spec;
    }
    return st;
}

uint64_t cli_image_tokens(uint32_t width, uint32_t height, uint32_t patch)
{
    return ((uint64_t)width + patch - 1) / patch * (((uint64_t)height + patch - 1) / patch);
}

/* The three fields of one line of an --items file into spec. */
static st_status_t cli_items_line(char **f, const char *name, unsigned line, cli_item_spec_t *spec,
                                  char *why, size_t why_len)
{
    uint64_t v;
    st_status_t st = ST_OK;

    memset(spec, 0, sizeof(*spec));
    if (strlen(f[0]) == 32 && st_hash_from_hex(f[0], &spec->hash) == ST_OK) {
        spec->src = CLI_ITEM_HASH;
    } else if (strncmp(f[0], "gen:", 4) == 0) {
        spec->src = CLI_ITEM_GEN;
        st = cli_item_gen_size(f[0], f[0] + 4, strlen(f[0] + 4), spec, why, why_len);
    } else if (strlen(f[0]) >= CLI_PATH_MAX) {
        st = cli_why(ST_ERR_INVALID, why, why_len, "%s line %u: the path is longer than %d", name,
                     line, CLI_PATH_MAX - 1);
    } else {
        spec->src = CLI_ITEM_FILE;
        memcpy(spec->path, f[0], strlen(f[0]) + 1);
    }
    if (st != ST_OK) {
        /* Put the file and line in front of the reason. */
        char inner[256];

        snprintf(inner, sizeof(inner), "%s", why);
        return cli_why(st, why, why_len, "%s line %u: %s", name, line, inner);
    }
    if (!cli_uint(f[1], strlen(f[1]), INT32_MAX * 2ull, &v)) {
        return cli_why(ST_ERR_INVALID, why, why_len,
                       "%s line %u: start '%.20s' is not a token position", name, line, f[1]);
    }
    spec->has_pos = 1;
    spec->start = v;
    if (strcmp(f[2], "auto") == 0) {
        if (spec->src == CLI_ITEM_HASH) {
            return cli_why(ST_ERR_INVALID, why, why_len,
                           "%s line %u: a content hash needs its length in tokens, not auto", name,
                           line);
        }
        return ST_OK;
    }
    if (!cli_uint(f[2], strlen(f[2]), 1ull << 40, &v) || v == 0) {
        return cli_why(ST_ERR_INVALID, why, why_len,
                       "%s line %u: length '%.20s' is not a token count above 0 (or auto)", name,
                       line, f[2]);
    }
    spec->n_tokens = v;
    return ST_OK;
}

st_status_t cli_items_parse_text(const char *text, const char *name, cli_item_spec_t *out,
                                 size_t cap, size_t *n_p, char *why, size_t why_len)
{
    size_t n = 0;
    unsigned line = 0;

    for (const char *p = text; *p != '\0';) {
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        char buf[CLI_PATH_MAX + 128], *f[4] = {NULL}, *save = NULL, *hash;
        int nf = 0;
        st_status_t st;

        line++;
        if (len >= sizeof(buf)) {
            return cli_why(ST_ERR_INVALID, why, why_len, "%s line %u: longer than %zu bytes", name,
                           line, sizeof(buf) - 1);
        }
        memcpy(buf, p, len);
        buf[len] = '\0';
        p += len + (eol != NULL);
        if ((hash = strchr(buf, '#')) != NULL) {
            *hash = '\0';
        }
        for (char *t = strtok_r(buf, " \t\r", &save); t != NULL && nf < 4;
             t = strtok_r(NULL, " \t\r", &save)) {
            f[nf++] = t;
        }
        if (nf == 0) {
            continue;
        }
        if (nf != 3) {
            return cli_why(ST_ERR_INVALID, why, why_len,
                           "%s line %u: expected SOURCE START LENGTH, got %s%d field%s", name, line,
                           nf > 3 ? "more than " : "", nf > 3 ? 3 : nf, nf == 1 ? "" : "s");
        }
        if (n == cap) {
            return cli_why(ST_ERR_INVALID, why, why_len, "%s line %u: more than %zu items", name,
                           line, cap);
        }
        st = cli_items_line(f, name, line, &out[n], why, why_len);
        if (st != ST_OK) {
            return st;
        }
        snprintf(out[n].from, sizeof(out[n].from), "--items %.60s line %u", name, line);
        n++;
    }
    *n_p = n;
    return ST_OK;
}

st_status_t cli_item_resolve(cli_item_spec_t *spec, uint32_t patch, char *why, size_t why_len)
{
    im_image_t img = {0};
    char reason[512] = "";
    st_status_t st;

    if (spec->src == CLI_ITEM_HASH) {
        return ST_OK;
    }
    if (spec->src == CLI_ITEM_FILE) {
        st = im_load(spec->path, &img, reason, sizeof(reason));
    } else {
        st = im_generate(spec->seed, spec->width, spec->height, spec->channels, &img);
        snprintf(reason, sizeof(reason), "gen:%u,%u,%llu,%u: %s", spec->width, spec->height,
                 (unsigned long long)spec->seed, spec->channels, st_strerror(st));
    }
    if (st != ST_OK) {
        return cli_why(st, why, why_len, "%s", reason);
    }
    st = st_hash_image(img.pixels, img.width, img.height, img.channels, &spec->hash);
    spec->width = img.width;
    spec->height = img.height;
    spec->channels = img.channels;
    im_free(&img);
    if (st != ST_OK) {
        return cli_why(st, why, why_len, "%s: the image cannot be hashed (%s)",
                       spec->src == CLI_ITEM_FILE ? spec->path : "gen", st_strerror(st));
    }
    if (spec->n_tokens == 0) {
        spec->n_tokens = cli_image_tokens(spec->width, spec->height, patch);
    }
    return ST_OK;
}

/* Parses each "\n"-separated argument of list with parse, appending to specs. */
static st_status_t cli_items_args(const char *list, const char *flag, int need_pos,
                                  st_status_t (*parse)(const char *, int, cli_item_spec_t *, char *,
                                                       size_t),
                                  cli_item_spec_t *specs, size_t *n, char *why, size_t why_len)
{
    for (const char *p = list; p != NULL && *p != '\0';) {
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        char arg[CLI_PATH_MAX + 64], inner[CLI_PATH_MAX + 128];
        st_status_t st;

        if (len >= sizeof(arg)) {
            return cli_why(ST_ERR_INVALID, why, why_len, "--%s: an argument is too long", flag);
        }
        if (*n == CLI_ITEMS_MAX) {
            return cli_why(ST_ERR_INVALID, why, why_len, "more than %d items", CLI_ITEMS_MAX);
        }
        memcpy(arg, p, len);
        arg[len] = '\0';
        p += len + (eol != NULL);
        st = parse(arg, need_pos, &specs[*n], inner, sizeof(inner));
        if (st != ST_OK) {
            return cli_why(st, why, why_len, "--%s %s", flag, inner);
        }
        snprintf(specs[*n].from, sizeof(specs[*n].from), "--%s", flag);
        (*n)++;
    }
    return ST_OK;
}

/* Orders specs by start, ties in their given order (insertion sort: stable). */
static void cli_items_sort(cli_item_spec_t *s, size_t n)
{
    for (size_t i = 1; i < n; i++) {
        cli_item_spec_t t = s[i];
        size_t j = i;

        for (; j > 0 && s[j - 1].start > t.start; j--) {
            s[j] = s[j - 1];
        }
        s[j] = t;
    }
}

/* Reads the --items file into specs after *n. */
static st_status_t cli_items_file(const char *path, cli_item_spec_t *specs, size_t *n, char *why,
                                  size_t why_len)
{
    FILE *f = fopen(path, "rb");
    char *text;
    long len;
    size_t got = 0;
    st_status_t st;

    if (f == NULL) {
        return cli_why(ST_ERR_IO, why, why_len, "--items %s: %s", path, strerror(errno));
    }
    if (fseek(f, 0, SEEK_END) != 0 || (len = ftell(f)) < 0 || len > (1 << 24) ||
        fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return cli_why(ST_ERR_IO, why, why_len, "--items %s: not a readable file of at most 16 MiB",
                       path);
    }
    text = malloc((size_t)len + 1);
    if (text == NULL || fread(text, 1, (size_t)len, f) != (size_t)len) {
        free(text);
        fclose(f);
        return cli_why(ST_ERR_IO, why, why_len, "--items %s: cannot read it", path);
    }
    fclose(f);
    text[len] = '\0';
    if (memchr(text, '\0', (size_t)len) != NULL) {
        free(text);
        return cli_why(ST_ERR_INVALID, why, why_len, "--items %s: a text file has no NUL bytes",
                       path);
    }
    st = cli_items_parse_text(text, path, specs + *n, CLI_ITEMS_MAX - *n, &got, why, why_len);
    free(text);
    *n += got;
    return st;
}

st_status_t cli_items_collect(const char *images, const char *gens, const char *items_file,
                              uint32_t patch, int need_pos, cli_item_spec_t **specs_p, size_t *n_p,
                              char *why, size_t why_len)
{
    cli_item_spec_t *specs;
    size_t n = 0;
    st_status_t st;

    *specs_p = NULL;
    *n_p = 0;
    if ((images == NULL || images[0] == '\0') && (gens == NULL || gens[0] == '\0') &&
        (items_file == NULL || items_file[0] == '\0')) {
        return ST_OK;
    }
    specs = calloc(CLI_ITEMS_MAX, sizeof(*specs));
    if (specs == NULL) {
        return cli_why(ST_ERR_NOMEM, why, why_len, "out of memory for the items");
    }
    st = cli_items_args(images, "image", need_pos, cli_item_parse_image, specs, &n, why, why_len);
    if (st == ST_OK) {
        st = cli_items_args(gens, "gen-image", need_pos, cli_item_parse_gen, specs, &n, why,
                            why_len);
    }
    if (st == ST_OK && items_file != NULL && items_file[0] != '\0') {
        st = cli_items_file(items_file, specs, &n, why, why_len);
    }
    for (size_t i = 0; st == ST_OK && i < n; i++) {
        char inner[CLI_PATH_MAX + 256];

        st = cli_item_resolve(&specs[i], patch, inner, sizeof(inner));
        if (st != ST_OK) {
            cli_why(st, why, why_len, "%s: %s", specs[i].from, inner);
        }
    }
    if (st != ST_OK) {
        free(specs);
        return st;
    }
    cli_items_sort(specs, n);
    *specs_p = specs;
    *n_p = n;
    return ST_OK;
}
