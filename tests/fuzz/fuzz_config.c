/*
 * fuzz_config.c - the declarative config table (common/config.c) fed mutated
 * INI files, flag lists and values: stratad's table, a table with one option
 * of every kind (and a flag-only one), and libstrata's client file through
 * st_client_connect().
 *
 * Checks, for every parse:
 *   - it returns ST_OK or an error whose message says where (file:line, the
 *     flag, or the file that cannot be opened); never a crash (the sanitizer
 *     build runs the same inputs);
 *   - after ST_OK, every value is within its option's bounds;
 *   - a value parses as a reference parser of the documented grammar says
 *     (integers, sizes with K/M/G/T, durations with ms/s/m/h/d, booleans,
 *     enums), and an error names the option;
 *   - a valid generated file or flag list gives exactly the values written;
 *   - a line too long for the parser to hold whole, a NUL byte, or an
 *     indented line (which the INI parser would take as a continuation of the
 *     value above) is an error: never a value cut short, or the tail of a
 *     line read as another setting.
 *
 * Bounds: STRATA_FUZZ_ITERS rounds (default below; each round is one value,
 * one file and one flag list per table), stopped early after
 * STRATA_FUZZ_SECONDS. STRATA_TEST_SEED replays a run.
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

const char *const fzc_modes[] = {"alpha", "beta", "gamma", NULL};

const cfg_option_t fzc_options[] = {
    {"listen", CFG_STRING, FZC_OFF(listen), "127.0.0.1:1", 0, 0, 0, NULL, 'l', "address"},
    {"size", CFG_SIZE, FZC_OFF(size), "1M", 1024, 1ll << 40, 0, NULL, 's', "a size"},
    {"dur", CFG_DURATION, FZC_OFF(dur), "5s", 10, 86400000, 0, NULL, 0, "a duration"},
    {"n", CFG_INT, FZC_OFF(n), "3", -1000, 1000000, 0, NULL, 'n', "a number"},
    {"flag", CFG_BOOL, FZC_OFF(flag), "false", 0, 0, 0, NULL, 'v', "a switch"},
    {"mode", CFG_ENUM, FZC_OFF(mode), "alpha", 0, 0, 0, fzc_modes, 0, "a mode"},
    {"token", CFG_STRING, FZC_OFF(token), "", 0, 0, CFG_SENSITIVE, NULL, 0, "a secret"},
    {"only_flag", CFG_STRING, FZC_OFF(only_flag), "", 0, 0, CFG_NOFILE, NULL, 0, "not in files"},
};
const cfg_table_t fzc_table = {"fuzzd", "a table with every kind of option", NULL, fzc_options,
                               sizeof(fzc_options) / sizeof(fzc_options[0])};
/* The keys of libstrata's client file (client/options.c), to mutate its files
 * with; the parse itself runs on the client's own table. */
const cfg_option_t fzc_client_options[] = {
    {"nodes", CFG_STRING, 0, "", 0, 0, 0, NULL, 0, ""},
    {"tenant", CFG_STRING, 0, "", 0, 0, 0, NULL, 0, ""},
    {"model", CFG_STRING, 0, "", 0, 0, 0, NULL, 0, ""},
    {"token", CFG_STRING, 0, "", 0, 0, 0, NULL, 0, ""},
    {"replicas", CFG_INT, 0, "2", 1, 16, 0, NULL, 0, ""},
    {"vnodes", CFG_INT, 0, "128", 1, 4096, 0, NULL, 0, ""},
    {"timeout", CFG_DURATION, 0, "5s", 10, 600000, 0, NULL, 0, ""},
    {"health_interval", CFG_DURATION, 0, "1s", 10, 600000, 0, NULL, 0, ""},
};
const cfg_table_t fzc_client_table = {"strata", "", NULL, fzc_client_options,
                                      sizeof(fzc_client_options) / sizeof(fzc_client_options[0])};

fzc_state_t G;

void fzc_fail(const char *fmt, ...)
{
    va_list ap;
    char hex[700];

    va_start(ap, fmt);
    fz_fail_head(fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n  seed=0x%016llx round=%llu input=%s\n", (unsigned long long)G.seed,
            (unsigned long long)G.round, G.what ? G.what : "-");
    fprintf(stderr, "  mutations: %s\n", G.log.len ? G.log.text : "(none)");
    if (G.input != NULL) {
        fz_hex((const uint8_t *)G.input, G.input_len < 300 ? G.input_len : 300, hex, sizeof(hex));
        fprintf(stderr, "  input (%zu bytes): %s\n  as text: \"", G.input_len, hex);
        for (size_t i = 0; i < G.input_len && i < 600; i++) {
            unsigned char ch = (unsigned char)G.input[i];

            fprintf(stderr, isprint(ch) ? "%c" : "\\x%02x", ch);
        }
        fprintf(stderr, "\"\n");
    }
    fprintf(stderr, "  replay: STRATA_TEST_SEED=0x%016llx\n", (unsigned long long)G.seed);
    if (G.path[0] != '\0') {
        fprintf(stderr, "  the file is kept at %s\n", G.path);
    }
    exit(1);
}

/* ------------------------------------------------------------- helpers -- */

static void *fzc_member(const cfg_option_t *o, void *conf)
{
    return (char *)conf + o->offset;
}

/* The value of an int, size or duration option as int64. */
int64_t fzc_num(const cfg_option_t *o, const void *conf)
{
    const char *p = (const char *)conf + o->offset;

    if (o->type == CFG_INT) {
        return *(const int64_t *)(const void *)p;
    }
    return (int64_t) * (const uint64_t *)(const void *)p;
}

void fzc_defaults(const cfg_table_t *t, fzc_any_t *c)
{
    memset(c, 0, sizeof(*c));
    FZC_CHECK(cfg_defaults(t, c) == ST_OK, "%s: defaults do not parse", t->program);
}

/* After ST_OK: every value of the table within its bounds. */
void fzc_check_bounds(const cfg_table_t *t, const void *conf)
{
    for (size_t i = 0; i < t->n_options; i++) {
        const cfg_option_t *o = &t->options[i];
        const char *p = (const char *)conf + o->offset;

        switch (o->type) {
        case CFG_INT:
        case CFG_SIZE:
        case CFG_DURATION: {
            int64_t v = fzc_num(o, conf);

            FZC_CHECK(v >= o->min && v <= o->max, "%s: %s = %lld outside [%lld, %lld]", t->program,
                      o->name, (long long)v, (long long)o->min, (long long)o->max);
            break;
        }
        case CFG_BOOL:
            FZC_CHECK(*(const int *)(const void *)p == 0 || *(const int *)(const void *)p == 1,
                      "%s: %s = %d is not a boolean", t->program, o->name,
                      *(const int *)(const void *)p);
            break;
        case CFG_ENUM: {
            int v = *(const int *)(const void *)p, n = 0;

            while (o->enum_names[n] != NULL) {
                n++;
            }
            FZC_CHECK(v >= 0 && v < n, "%s: %s = %d is not an enum index", t->program, o->name, v);
            break;
        }
        case CFG_STRING:
            FZC_CHECK(*(char *const *)(const void *)p != NULL, "%s: %s is NULL", t->program,
                      o->name);
            break;
        }
    }
}

/* ----------------------------------------------------- reference parser -- */

/*
 * The documented value grammar (config.h), written again independently.
 * Returns 1 and sets *v for a valid value within the option's bounds.
 */
static int fzc_ref_scaled(const char *s, const char *const *sfx, const uint64_t *scale,
                          uint64_t *out)
{
    uint64_t v = 0, k = 1;

    while (*s == ' ' || *s == '\t') {
        s++;
    }
    if (!isdigit((unsigned char)*s)) {
        return 0;
    }
    for (; isdigit((unsigned char)*s); s++) {
        if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, *s - '0', &v)) {
            return 0;
        }
    }
    while (*s == ' ') {
        s++;
    }
    if (*s != '\0') {
        size_t i;

        for (i = 0; sfx[i] != NULL && strcasecmp(s, sfx[i]) != 0; i++) {
        }
        if (sfx[i] == NULL) {
            return 0;
        }
        k = scale[i];
    }
    return !__builtin_mul_overflow(v, k, out);
}

static int fzc_ref(const cfg_option_t *o, const char *s, int64_t *v)
{
    static const char *const size_sfx[] = {"b", "k",  "kb",  "kib", "m",  "mb",  "mib",
                                           "g", "gb", "gib", "t",   "tb", "tib", NULL};
    static const uint64_t size_scale[] = {
        1,          1ull << 10, 1ull << 10, 1ull << 10, 1ull << 20, 1ull << 20, 1ull << 20,
        1ull << 30, 1ull << 30, 1ull << 30, 1ull << 40, 1ull << 40, 1ull << 40};
    static const char *const dur_sfx[] = {"ms", "s", "m", "h", "d", NULL};
    static const uint64_t dur_scale[] = {1, 1000, 60000, 3600000, 86400000};
    static const char *const yes[] = {"true", "yes", "on", "1"};
    static const char *const no[] = {"false", "no", "off", "0"};
    uint64_t u;

    switch (o->type) {
    case CFG_STRING: return 1;
    case CFG_BOOL:
        for (int i = 0; i < 4; i++) {
            if (strcasecmp(s, yes[i]) == 0 || strcasecmp(s, no[i]) == 0) {
                *v = strcasecmp(s, yes[i]) == 0;
                return 1;
            }
        }
        return 0;
    case CFG_ENUM:
        for (int i = 0; o->enum_names[i] != NULL; i++) {
            if (strcasecmp(s, o->enum_names[i]) == 0) {
                *v = i;
                return 1;
            }
        }
        return 0;
    case CFG_INT: {
        const char *p = s;
        int neg = 0;
        uint64_t m = 0;

        while (isspace((unsigned char)*p)) {
            p++;
        }
        if (*p == '+' || *p == '-') {
            neg = *p++ == '-';
        }
        if (!isdigit((unsigned char)*p)) {
            return 0;
        }
        for (; isdigit((unsigned char)*p); p++) {
            if (__builtin_mul_overflow(m, 10, &m) || __builtin_add_overflow(m, *p - '0', &m) ||
                m > (uint64_t)INT64_MAX + neg) {
                return 0;
            }
        }
        if (*p != '\0') {
            return 0;
        }
        *v = neg ? (int64_t)(0 - m) : (int64_t)m;
        break;
    }
    case CFG_SIZE:
    case CFG_DURATION:
        if (!fzc_ref_scaled(s, o->type == CFG_SIZE ? size_sfx : dur_sfx,
                            o->type == CFG_SIZE ? size_scale : dur_scale, &u) ||
            u > INT64_MAX) {
            return 0;
        }
        *v = (int64_t)u;
        break;
    }
    return *v >= o->min && *v <= o->max;
}

/* ---------------------------------------------------------- generators -- */

/* Mixed case, so that case-insensitive names are tried. */
static char *fzc_case(fz_rng_t *r, const char *s)
{
    size_t n = strlen(s);
    char *c = fz_alloc(n + 1);

    for (size_t i = 0; i < n; i++) {
        c[i] = fz_chance(r, 30) ? (char)toupper((unsigned char)s[i]) : s[i];
    }
    return c;
}

/* A valid value of option o as text; *v gets its value (strings: none). */
char *fzc_valid(fz_rng_t *r, const cfg_option_t *o, int64_t *v)
{
    char *buf = fz_alloc(96);

    switch (o->type) {
    case CFG_BOOL: {
        static const char *const b[] = {"true", "yes", "on", "1", "false", "no", "off", "0"};
        size_t i = fz_below(r, 8);

        *v = i < 4;
        return fzc_case(r, b[i]);
    }
    case CFG_ENUM: {
        int n = 0;

        while (o->enum_names[n] != NULL) {
            n++;
        }
        *v = (int64_t)fz_below(r, (uint64_t)n);
        return fzc_case(r, o->enum_names[*v]);
    }
    case CFG_STRING: {
        size_t n = fz_below(r, 60);

        /* No quotes, comment characters or spaces at the ends: as written. */
        for (size_t i = 0; i < n; i++) {
            buf[i] = (char)"abcdefghijklmnopqrstuvwxyz0123456789:.,_-/"[fz_below(r, 42)];
        }
        buf[n] = '\0';
        *v = 0;
        return buf;
    }
    case CFG_INT:
        switch (fz_below(r, 3)) {
        case 0: *v = o->min; break;
        case 1: *v = o->max; break;
        default: *v = o->min + (int64_t)fz_below(r, (uint64_t)(o->max - o->min) + 1); break;
        }
        snprintf(buf, 96, "%lld", (long long)*v);
        return buf;
    case CFG_SIZE:
    case CFG_DURATION: {
        static const char *const ssfx[] = {"", "K", "M", "G", "T"};
        static const char *const dsfx[] = {"ms", "s", "m", "h", "d"};
        static const uint64_t sscale[] = {1, 1ull << 10, 1ull << 20, 1ull << 30, 1ull << 40};
        static const uint64_t dscale[] = {1, 1000, 60000, 3600000, 86400000};
        const uint64_t *scale = o->type == CFG_SIZE ? sscale : dscale;

        for (;;) {
            size_t k = fz_below(r, 5);
            uint64_t lo = ((uint64_t)o->min + scale[k] - 1) / scale[k],
                     hi = (uint64_t)o->max / scale[k];

            if (lo > hi) {
                continue;
            }
            *v = (int64_t)((lo + fz_below(r, hi - lo + 1)) * scale[k]);
            snprintf(buf, 96, "%llu%s", (unsigned long long)((uint64_t)*v / scale[k]),
                     o->type == CFG_SIZE ? ssfx[k] : dsfx[k]);
            return fzc_case(r, buf);
        }
    }
    }
    return buf;
}

/* A value that is probably not valid: huge numbers, bad units, junk. */
char *fzc_junk(fz_rng_t *r)
{
    static const char *const v[] = {"",
                                    "-1",
                                    "+5",
                                    " 7",
                                    "0",
                                    "99999999999999999999",
                                    "18446744073709551615",
                                    "18446744073709551616",
                                    "9223372036854775807",
                                    "9223372036854775808",
                                    "-9223372036854775808",
                                    "17592186044416T",
                                    "16777216T",
                                    "8388608T",
                                    "1T",
                                    "5 fortnights",
                                    "1.5G",
                                    "G",
                                    "0x10",
                                    "1e3",
                                    "5 s",
                                    "5s s",
                                    "5ms5",
                                    "213503982335d",
                                    "106751991167d",
                                    "4G",
                                    "64M",
                                    "1k",
                                    "1KiB",
                                    "yes",
                                    "maybe",
                                    "TRUE",
                                    "\"quoted\"",
                                    "\"",
                                    "a;b",
                                    "a ; comment",
                                    "caf\xc3\xa9",
                                    "\xff\xfe"};
    char *s;
    size_t n;

    if (fz_chance(r, 70)) {
        return (char *)v[fz_below(r, sizeof(v) / sizeof(v[0]))];
    }
    n = fz_below(r, 40);
    s = fz_alloc(n + 1);
    for (size_t i = 0; i < n; i++) {
        s[i] = (char)"0123456789 kKmMgGtTbBsShHdDiI+-.x\t"[fz_below(r, 34)];
    }
    return s;
}

/* -------------------------------------------------------------- values -- */

/* One value of every option through cfg_set, against the reference. */
static void fzc_values(fz_rng_t *r, const cfg_table_t *t)
{
    for (size_t i = 0; i < t->n_options; i++) {
        const cfg_option_t *o = &t->options[i];
        fzc_any_t c;
        char err[256] = "";
        int64_t want = 0, got;
        const char *text = fz_chance(r, 40) ? fzc_valid(r, o, &want) : fzc_junk(r);
        int ok_ref = fzc_ref(o, text, &want);
        st_status_t st;

        fz_log_clear(&G.log);
        G.what = "value";
        G.input = text;
        G.input_len = strlen(text);
        fzc_defaults(t, &c);
        st = cfg_set(t, &c, o->name, text, "x.ini:7", err, sizeof(err));
        G.values++;
        G.values_ok += st == ST_OK;
        FZC_CHECK(st == ST_OK || st == ST_ERR_INVALID, "%s: %s = '%s' returned %s", t->program,
                  o->name, text, st_status_name(st));
        FZC_CHECK((st == ST_OK) == ok_ref,
                  "%s: %s = '%s' parsed %s, the documented grammar says %s", t->program, o->name,
                  text, st == ST_OK ? "OK" : err, ok_ref ? "valid" : "invalid");
        if (st != ST_OK) {
            FZC_CHECK(strncmp(err, "x.ini:7: ", 9) == 0 && strstr(err, o->name) != NULL,
                      "%s: the error for %s = '%s' does not name the place and the key: %s",
                      t->program, o->name, text, err);
        } else if (o->type == CFG_STRING) {
            FZC_CHECK(strcmp(*(char **)fzc_member(o, &c), text) == 0,
                      "%s: %s = '%s' stored as '%s'", t->program, o->name, text,
                      *(char **)fzc_member(o, &c));
        } else {
            got = o->type == CFG_BOOL || o->type == CFG_ENUM ? *(int *)fzc_member(o, &c)
                                                             : fzc_num(o, &c);
            FZC_CHECK(got == want, "%s: %s = '%s' gave %lld, expected %lld", t->program, o->name,
                      text, (long long)got, (long long)want);
        }
        fzc_check_bounds(t, &c);
        cfg_free(t, &c);
    }
}

/* --------------------------------------------------------------- flags -- */

static void fzc_flags(fz_rng_t *r, const cfg_table_t *t)
{
    char *argv[64], *copy[64], name[160];
    int argc = 1, npos = -1, help = 0, want_pos = 0, mutated = fz_chance(r, 70);
    const char *want[64];
    fzc_expect_t e;
    fzc_any_t c;
    char err[512] = "";
    fzc_text_t shown = {0};
    st_status_t st;

    memset(&e, 0, sizeof(e));
    fz_log_clear(&G.log);
    G.what = "flags";
    argv[0] = (char *)t->program;
    for (size_t k = 0, n = fz_below(r, 8); k < n && argc < 40; k++) {
        size_t i = fz_below(r, t->n_options);
        const cfg_option_t *o = &t->options[i];
        int64_t v = 0;
        char *text = fzc_valid(r, o, &v);

        if (o->type == CFG_STRING && fz_chance(r, 10)) {
            /* A value that looks like a flag is still the value. */
            static const char *const flaglike[] = {"-h", "--help", "-c",        "--config",
                                                   "--", "-",      "--no-flag", "-v"};

            text = (char *)flaglike[fz_below(r, sizeof(flaglike) / sizeof(flaglike[0]))];
        }
        if (fz_chance(r, 15)) {
            want[want_pos++] = argv[argc++] = "positional";
        }
        for (size_t j = 0; o->name[j] != '\0' && j + 1 < sizeof(name); j++) {
            name[j] = o->name[j] == '_' ? '-' : o->name[j];
            name[j + 1] = '\0';
        }
        if (o->type == CFG_BOOL && fz_chance(r, 50)) {
            argv[argc] = fz_alloc(strlen(name) + 8);
            sprintf(argv[argc++], v ? "--%s" : "--no-%s", name);
        } else if (o->short_flag && fz_chance(r, 30) && o->type != CFG_BOOL) {
            argv[argc] = fz_alloc(3);
            sprintf(argv[argc++], "-%c", o->short_flag);
            argv[argc++] = text;
        } else if (fz_chance(r, 50)) {
            argv[argc] = fz_alloc(strlen(name) + strlen(text) + 4);
            sprintf(argv[argc++], "--%s=%s", name, text);
        } else if (o->type != CFG_BOOL) {
            argv[argc] = fz_alloc(strlen(name) + 3);
            sprintf(argv[argc++], "--%s", name);
            argv[argc++] = text;
        } else {
            argv[argc] = fz_alloc(strlen(name) + strlen(text) + 4);
            sprintf(argv[argc++], "--%s=%s", name, text);
        }
        e.set[i] = 1;
        e.v[i] = v;
        e.s[i] = text;
    }
    if (fz_chance(r, 20)) {
        argv[argc++] = "--";
        want[want_pos++] = argv[argc++] = "--after-the-end";
    }
    if (mutated) {
        for (unsigned k = 0, n = 1 + (unsigned)fz_below(r, 3); k < n && argc < 60; k++) {
            static const char *const odd[] = {
                "-",      "--",        "---x",      "--=",         "--n=", "-n",
                "--size", "-x",        "--no-size", "--no-flag",   "-c",   "--config",
                "-h",     "--listen=", "--nope=1",  "--flag=maybe"};
            size_t at = 1 + fz_below(r, (uint64_t)argc);

            memmove(argv + at + 1, argv + at, sizeof(char *) * (size_t)(argc - at));
            argc++;
            switch (fz_below(r, 4)) {
            case 0: argv[at] = (char *)odd[fz_below(r, sizeof(odd) / sizeof(odd[0]))]; break;
            case 1: argv[at] = fzc_junk(r); break;
            case 2: argv[at] = "--config=/nonexistent/strata.ini"; break;
            default: {
                size_t L = fz_below(r, 300);
                char *s = fz_alloc(L + 3);

                s[0] = '-';
                s[1] = '-';
                for (size_t i = 0; i < L; i++) {
                    s[2 + i] = (char)(1 + fz_below(r, 255));
                }
                argv[at] = s;
                break;
            }
            }
            fz_logf(&G.log, "argv[%zu] = '%.40s'", at, argv[at]);
        }
    }
    argv[argc] = NULL;
    for (int i = 0; i < argc; i++) {
        fzc_putf(&shown, "%s%s", i ? " " : "", argv[i]);
    }
    G.input = shown.p;
    G.input_len = shown.len;
    memcpy(copy, argv, sizeof(char *) * (size_t)(argc + 1));
    fzc_defaults(t, &c);
    st = cfg_parse_args(t, &c, argc, copy, &npos, &help, err, sizeof(err));
    G.flags++;
    G.flags_ok += st == ST_OK;
    FZC_CHECK(st == ST_OK || st == ST_ERR_INVALID || st == ST_ERR_NOT_FOUND || st == ST_ERR_IO,
              "%s: flags returned %s (%s)", t->program, st_status_name(st), err);
    if (st != ST_OK) {
        FZC_CHECK(err[0] != '\0' && (strstr(err, "--") != NULL || strstr(err, "flag") != NULL ||
                                     strstr(err, "-c") != NULL || strstr(err, "config") != NULL ||
                                     strstr(err, "missing") != NULL),
                  "%s: the error does not name the flag: '%s'", t->program, err);
    } else if (!help) {
        fzc_check_bounds(t, &c);
        FZC_CHECK(npos >= 0 && npos < argc, "%s: %d positional arguments of %d", t->program, npos,
                  argc);
    }
    if (!mutated) {
        FZC_CHECK(st == ST_OK && !help, "%s: a valid flag list was refused: %s", t->program, err);
        fzc_check_expect(t, &c, &e);
        FZC_CHECK(npos == want_pos, "%s: %d positional arguments, expected %d", t->program, npos,
                  want_pos);
        for (int i = 0; i < want_pos; i++) {
            FZC_CHECK(strcmp(copy[1 + i], want[i]) == 0,
                      "%s: positional argument %d is '%s', expected '%s'", t->program, i,
                      copy[1 + i], want[i]);
        }
    }
    cfg_free(t, &c);
}

/* ---------------------------------------------------------- the client -- */

/* libstrata's client file: the same parser under another table, reached
 * through st_client_connect (nodes "" so that nothing connects). */
static void fzc_client(fz_rng_t *r)
{
    static const char base[] = "nodes = 127.0.0.1:1,127.0.0.1:2\ntenant = acme\nmodel = k3\n"
                               "replicas = 2\nvnodes = 64\ntimeout = 5s\nhealth_interval = 1s\n";
    fzc_text_t f = {0};
    st_client_params_t p;
    st_client_t *cl = NULL;
    const char *refuse, *msg;
    int mutated = fz_chance(r, 80);
    st_status_t st;

    fz_log_clear(&G.log);
    G.what = "client file";
    fzc_put(&f, base, sizeof(base) - 1);
    if (mutated) {
        fzc_mutate_file(r, &fzc_client_table, &f);
    }
    G.input = f.p;
    G.input_len = f.len;
    refuse = fzc_must_refuse(f.p, f.len);
    fzc_write(f.p, f.len);
    memset(&p, 0, sizeof(p));
    p.field_mask = ST_CLIENT_FIELD_CONFIG_FILE | ST_CLIENT_FIELD_NODES | ST_CLIENT_FIELD_TRANSPORT;
    p.config_file = G.path;
    p.nodes = "";           /* stops after the file, before any connection */
    p.transport = "inline"; /* whatever the file says */
    st = st_client_connect(&p, &cl);
    msg = st_client_last_error();
    G.client++;
    FZC_CHECK(st != ST_OK, "client: connected with no nodes");
    FZC_CHECK(msg != NULL && msg[0] != '\0', "client: %s without a message", st_status_name(st));
    if (strstr(msg, "no nodes given") != NULL) {
        G.client_ok++;
        FZC_CHECK(refuse == NULL, "client: a file with %s parsed OK", refuse);
    } else {
        FZC_CHECK(strstr(msg, G.path) != NULL, "client: the error does not name the file: '%s'",
                  msg);
        FZC_CHECK(mutated, "client: a valid file was refused: %s", msg);
    }
}

/* --------------------------------------------------------- regressions -- */

/* Loads text into stratad's table; the result must be want (with a message
 * holding msg); returns the config for more checks (free it). */
static void fzc_regress_file(const char *what, const char *text, size_t len, st_status_t want,
                             const char *msg, fzc_any_t *c)
{
    char err[512] = "";
    st_status_t st;

    G.what = what;
    G.input = text;
    G.input_len = len;
    fz_log_clear(&G.log);
    fzc_write(text, len);
    fzc_defaults(&cd_config_table, c);
    st = cfg_load_file(&cd_config_table, c, G.path, err, sizeof(err));
    FZC_CHECK(st == want && strstr(err, msg) != NULL,
              "regression (%s): %s with '%s', expected %s with '%s'", what, st_status_name(st), err,
              st_status_name(want), msg);
}

#define FZC_LIT(s) s, sizeof(s) - 1

/* Inputs that were once misread (docs/protocol.md, "Fuzzing"). */
static void fzc_regressions(void)
{
    char line[400];
    fzc_any_t c;
    int n;

    /* A line longer than inih's 200-byte buffer: cut, and its tail read as
     * a line of its own (here: memory_limit = 2G). */
    n = snprintf(line, sizeof(line), "node_id = ");
    memset(line + n, 'b', 189);
    n += 189;
    n += snprintf(line + n, sizeof(line) - (size_t)n, "memory_limit = 2G\n");
    fzc_regress_file("long line", line, (size_t)n, ST_ERR_INVALID, ":1: line longer than 198", &c);
    FZC_CHECK(c.stratad.memory_limit == 1ull << 30, "the tail of a long line was applied");
    cfg_free(&cd_config_table, &c);
    /* 198 bytes fit, whole. */
    n = snprintf(line, sizeof(line), "node_id = ");
    memset(line + n, 'c', 188);
    n += 188;
    line[n++] = '\n';
    fzc_regress_file("198-byte line", line, (size_t)n, ST_OK, "", &c);
    FZC_CHECK(strlen(c.stratad.node_id) == 188, "a 198-byte line was cut");
    cfg_free(&cd_config_table, &c);
    /* A NUL byte: the value was cut there, the rest dropped. */
    fzc_regress_file("NUL", FZC_LIT("node_id = abc\0def\nmemory_limit = 2G\n"), ST_ERR_INVALID,
                     ":1: a NUL byte", &c);
    cfg_free(&cd_config_table, &c);
    /* Indented keys: the second became part of the first's value
     * (node_id = "listen = 127.0.0.1:9"). */
    fzc_regress_file("indented", FZC_LIT("[stratad]\n  node_id = n1\n  listen = 127.0.0.1:9\n"),
                     ST_ERR_INVALID, ":2: the line starts with white space", &c);
    cfg_free(&cd_config_table, &c);
    fzc_regress_file("indented comment", FZC_LIT("node_id = n1\n  # a note\n"), ST_OK, "", &c);
    FZC_CHECK(strcmp(c.stratad.node_id, "n1") == 0, "node_id is '%s'", c.stratad.node_id);
    cfg_free(&cd_config_table, &c);

    /* A flag's value that looks like a flag was read as one by the first
     * pass: "--node-id -h" printed the help, "--auth-token -c x" loaded x. */
    {
        char *argv[] = {"stratad", "--node-id", "-h",          "--auth-token",
                        "-c",      "--listen",  "127.0.0.1:9", NULL};
        char err[256] = "";
        int npos = -1, help = -1;
        st_status_t st;

        G.what = "flags: --node-id -h --auth-token -c";
        G.input = NULL;
        fzc_defaults(&cd_config_table, &c);
        st = cfg_parse_args(&cd_config_table, &c, 7, argv, &npos, &help, err, sizeof(err));
        FZC_CHECK(st == ST_OK && help == 0 && npos == 0 && strcmp(c.stratad.node_id, "-h") == 0 &&
                      strcmp(c.stratad.auth_token, "-c") == 0 &&
                      strcmp(c.stratad.listen, "127.0.0.1:9") == 0,
                  "regression (flag values like flags): %s help=%d '%s'", st_status_name(st), help,
                  err);
        cfg_free(&cd_config_table, &c);
    }
}

/* ---------------------------------------------------------------- main -- */

int main(void)
{
    uint64_t iters = fz_env_u64("STRATA_FUZZ_ITERS", FZC_ITERS);
    double limit = (double)fz_env_u64("STRATA_FUZZ_SECONDS", FZC_SECONDS), t0 = fz_now();
    const cfg_table_t *tables[] = {&cd_config_table, &fzc_table};
    fz_rng_t r;
    int fd, stopped_early = 0;

    setvbuf(stdout, NULL, _IOLBF, 0);
    G.seed = fz_seed("fuzz_config");
    printf("fuzz_config: %llu rounds, at most %.0f s (STRATA_FUZZ_ITERS, STRATA_FUZZ_SECONDS)\n",
           (unsigned long long)iters, limit);
    fz_rng_init(&r, G.seed, 0);
    for (size_t t = 0; t < 2; t++) {
        FZC_CHECK(tables[t]->n_options <= FZC_OPTS, "table %s has too many options",
                  tables[t]->program);
    }
    snprintf(G.path, sizeof(G.path), "/tmp/fuzz_config_XXXXXX");
    fd = mkstemp(G.path);
    FZC_CHECK(fd >= 0, "mkstemp: %s", strerror(errno));
    close(fd);

    fzc_regressions();
    for (G.round = 0; G.round < iters; G.round++) {
        for (size_t t = 0; t < 2; t++) {
            fzc_values(&r, tables[t]);
            fzc_file(&r, tables[t]);
            fzc_flags(&r, tables[t]);
            fz_arena_reset();
        }
        if (G.round % FZC_CLIENT == 0) {
            fzc_client(&r);
            fz_arena_reset();
        }
        if (G.round % 64 == 0 && fz_now() - t0 > limit) {
            stopped_early = 1;
            break;
        }
    }
    unlink(G.path);
    G.path[0] = '\0';
    printf("values:      %llu parsed, %llu accepted (each agreed with the reference grammar)\n",
           (unsigned long long)G.values, (unsigned long long)G.values_ok);
    printf("files:       %llu parsed, %llu accepted; refused as they must be: %llu with a NUL, "
           "%llu with a long line, %llu with an indented line\n",
           (unsigned long long)G.files, (unsigned long long)G.files_ok, (unsigned long long)G.nuls,
           (unsigned long long)G.long_lines, (unsigned long long)G.indented);
    printf("flag lists:  %llu parsed, %llu accepted\n", (unsigned long long)G.flags,
           (unsigned long long)G.flags_ok);
    printf("client files: %llu, %llu parsed whole\n", (unsigned long long)G.client,
           (unsigned long long)G.client_ok);
    printf("fuzz_config: passed in %.1f s%s (seed=0x%016llx)\n", fz_now() - t0,
           stopped_early ? ", stopped early by STRATA_FUZZ_SECONDS" : "",
           (unsigned long long)G.seed);
    return 0;
}
