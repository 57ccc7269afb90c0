/*
 * fuzz_cli_items.c - the argument parsers of `strata hash/put/get`
 * (client/cli/cli_items.c): --image FILE@POS[:LEN], --gen-image
 * W,H,SEED[,C]@POS[:LEN] and the text of an --items file.
 *
 * Inputs: well-formed arguments and files made from random specs (paths with
 * '@', ':' and ',' in them, the largest and smallest numbers), the same with
 * bit flips, truncations and inserts (fuzz_util.c), and random text over the
 * parsers' own alphabet. Each is parsed from a buffer of exactly its size.
 *
 * Oracle: a well-formed input is accepted with exactly the fields it was made
 * from. Anything accepted is in range: a non-empty path equal to the text
 * before the last '@', sides 1..ST_IMAGE_SIDE_MAX, 1 or 3 channels, a length
 * above 0 (or auto for an image), and an --items file gives one item per line
 * that is neither blank nor a comment. A refusal is ST_ERR_INVALID with a
 * NUL-terminated, non-empty reason (an --items refusal names its line) and
 * leaves the output untouched.
 *
 * Bounds: STRATA_FUZZ_ITERS inputs (default 40,000). The seed is printed;
 * STRATA_TEST_SEED replays it.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_items.h"
#include "fuzz_util.h"

#define FC_ITERS 40000
#define FC_CAP   8

static uint64_t g_seed, g_iter;
static fz_log_t g_log;

static void __attribute__((noreturn, format(printf, 3, 4)))
fc_fail(const char *in, size_t len, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    fz_fail_one(g_seed, g_iter, &g_log, "input", (const uint8_t *)in, len, fmt, ap);
}

/* A random path: letters, '/', '.', and now and then '@', ':' or ','. */
static void fc_path(fz_rng_t *r, char *out, size_t cap)
{
    static const char al[] = "abcxyz/._-@:,0123456789";
    size_t n = 1 + fz_below(r, cap < 40 ? cap - 1 : 39);

    for (size_t i = 0; i < n; i++) {
        out[i] = al[fz_below(r, sizeof(al) - 1)];
    }
    out[n] = '\0';
}

static uint64_t fc_num(fz_rng_t *r, uint64_t lo, uint64_t hi)
{
    switch (fz_below(r, 4)) {
    case 0: return lo;
    case 1: return hi;
    default: return lo + fz_below(r, hi - lo + 1);
    }
}

/* A well-formed --image or --gen-image argument of a random spec into buf. */
static void fc_make_arg(fz_rng_t *r, int gen, cli_item_spec_t *want, char *buf, size_t cap)
{
    int n;

    memset(want, 0, sizeof(*want));
    if (gen) {
        want->src = CLI_ITEM_GEN;
        want->width = (uint32_t)fc_num(r, 1, ST_IMAGE_SIDE_MAX);
        want->height = (uint32_t)fc_num(r, 1, ST_IMAGE_SIDE_MAX);
        want->seed = fz_chance(r, 10) ? UINT64_MAX : fz_below(r, 1000000);
        want->channels = fz_chance(r, 50) ? 3 : 1;
        n = snprintf(buf, cap, "%u,%u,%" PRIu64, want->width, want->height, want->seed);
        if (want->channels == 1 || fz_chance(r, 50)) {
            n += snprintf(buf + n, cap - (size_t)n, ",%u", want->channels);
        }
    } else {
        want->src = CLI_ITEM_FILE;
        fc_path(r, want->path, sizeof(want->path));
        n = snprintf(buf, cap, "%s", want->path);
    }
    want->has_pos = 1;
    want->start = fc_num(r, 0, INT32_MAX * 2ull);
    n += snprintf(buf + n, cap - (size_t)n, "@%" PRIu64, want->start);
    if (fz_chance(r, 50)) {
        want->n_tokens = fc_num(r, 1, 1ull << 40);
        snprintf(buf + n, cap - (size_t)n, ":%" PRIu64, want->n_tokens);
    }
}

static int fc_same(const cli_item_spec_t *a, const cli_item_spec_t *b)
{
    return a->src == b->src && strcmp(a->path, b->path) == 0 && a->width == b->width &&
           a->height == b->height && a->channels == b->channels && a->seed == b->seed &&
           a->has_pos == b->has_pos && a->start == b->start && a->n_tokens == b->n_tokens;
}

/* The invariants of one parsed --image or --gen-image argument. */
static void fc_check_arg(const char *in, size_t len, int gen, st_status_t st,
                         const cli_item_spec_t *got, const cli_item_spec_t *before, const char *why)
{
    if (st != ST_OK) {
        if (st != ST_ERR_INVALID || why[0] == '\0' || memchr(why, '\0', 256) == NULL) {
            fc_fail(in, len, "refusal %d without a reason", st);
        }
        if (memcmp(got, before, sizeof(*got)) != 0) {
            fc_fail(in, len, "a refusal wrote the output");
        }
        return;
    }
    if (!got->has_pos || got->start > INT32_MAX * 2ull) {
        fc_fail(in, len, "accepted without a position in range");
    }
    if (gen) {
        if (got->src != CLI_ITEM_GEN || got->width < 1 || got->height < 1 ||
            got->width > ST_IMAGE_SIDE_MAX || got->height > ST_IMAGE_SIDE_MAX ||
            (got->channels != 1 && got->channels != 3)) {
            fc_fail(in, len, "accepted a generated image out of range");
        }
    } else {
        const char *at = strrchr(in, '@');

        if (got->src != CLI_ITEM_FILE || at == NULL || (size_t)(at - in) != strlen(got->path) ||
            got->path[0] == '\0' || memcmp(got->path, in, strlen(got->path)) != 0) {
            fc_fail(in, len, "the path is not the text before the last '@'");
        }
    }
}

/* One argument: made, maybe mutated, parsed from a buffer of its size. */
static void fc_one_arg(fz_rng_t *r)
{
    int gen = fz_chance(r, 50), mutate = fz_chance(r, 60);
    cli_item_spec_t want, got, before;
    char made[256], why[256];
    size_t len;
    char *in;
    uint8_t *m;
    st_status_t st;

    fc_make_arg(r, gen, &want, made, sizeof(made));
    len = strlen(made);
    m = mutate ? fz_mutate_bytes(r, (const uint8_t *)made, len, &len, &g_log) : NULL;
    in = malloc(len + 1);
    memcpy(in, m != NULL ? (const char *)m : made, len);
    in[len] = '\0';
    if (strlen(in) != len) { /* a NUL in the middle: what a shell cannot pass */
        free(in);
        return;
    }
    memset(&got, 0x5a, sizeof(got));
    before = got;
    why[0] = '\0';
    st = gen ? cli_item_parse_gen(in, 1, &got, why, sizeof(why))
             : cli_item_parse_image(in, 1, &got, why, sizeof(why));
    fc_check_arg(in, len, gen, st, &got, &before, why);
    if (!mutate && (st != ST_OK || !fc_same(&got, &want))) {
        fc_fail(in, len, "a well-formed argument was not read as made (%s)", why);
    }
    free(in);
}

/* Lines that are neither blank nor a comment. */
static size_t fc_count_lines(const char *text)
{
    size_t n = 0;

    for (const char *p = text; *p != '\0';) {
        const char *eol = strchr(p, '\n');
        size_t l = eol ? (size_t)(eol - p) : strlen(p);
        int any = 0;

        for (size_t i = 0; i < l && p[i] != '#'; i++) {
            any |= p[i] != ' ' && p[i] != '\t' && p[i] != '\r';
        }
        n += any;
        p += l + (eol != NULL);
    }
    return n;
}

/* One --items text: made of random lines, maybe mutated, or random. */
static void fc_one_file(fz_rng_t *r)
{
    static const char al[] = "0123456789abcdef gen:,@#\t\nauto/x.";
    cli_item_spec_t out[FC_CAP], before[FC_CAP];
    char text[2048], why[256];
    size_t len = 0, n = 0, lines = 0;
    int mutate = fz_chance(r, 40), random = fz_chance(r, 20);
    uint8_t *m = NULL;
    char *in;
    st_status_t st;

    for (size_t i = 0, k = fz_below(r, FC_CAP + 2); !random && i < k; i++) {
        cli_item_spec_t want;
        char arg[256], hex[33];
        st_hash_t h;

        fc_make_arg(r, fz_chance(r, 50), &want, arg, sizeof(arg));
        switch (fz_below(r, 4)) {
        case 0:
            fz_fill(r, h.b, sizeof(h.b));
            st_hash_to_hex(&h, hex);
            len += (size_t)snprintf(text + len, sizeof(text) - len, "%s %u %u\n", hex,
                                    (unsigned)fz_below(r, 1000), 1 + (unsigned)fz_below(r, 99));
            break;
        case 1:
            len += (size_t)snprintf(text + len, sizeof(text) - len, "gen:%u,%u,%u %u auto\n",
                                    1 + (unsigned)fz_below(r, 99), 1 + (unsigned)fz_below(r, 99),
                                    (unsigned)fz_below(r, 9), (unsigned)fz_below(r, 1000));
            break;
        case 2:
            len += (size_t)snprintf(text + len, sizeof(text) - len, "  # a comment\n\n");
            continue; /* no item */
        default:
            fc_path(r, arg, 40);
            len += (size_t)snprintf(text + len, sizeof(text) - len, "%s\t%u %s\n",
                                    arg[0] == '#' ? "x" : arg, (unsigned)fz_below(r, 1000),
                                    fz_chance(r, 50) ? "auto" : "7");
        }
        lines++;
    }
    for (size_t i = 0, k = random ? fz_below(r, 300) : 0; i < k; i++) {
        text[len++] = al[fz_below(r, sizeof(al) - 1)];
    }
    text[len] = '\0';
    if (mutate) {
        m = fz_mutate_bytes(r, (const uint8_t *)text, len, &len, &g_log);
    }
    in = malloc(len + 1);
    memcpy(in, m != NULL ? (const char *)m : text, len);
    in[len] = '\0';
    len = strlen(in);
    memset(out, 0x33, sizeof(out));
    memcpy(before, out, sizeof(out));
    why[0] = '\0';
    st = cli_items_parse_text(in, "items.txt", out, FC_CAP, &n, why, sizeof(why));
    if (st != ST_OK) {
        if (st != ST_ERR_INVALID || strstr(why, "items.txt line ") == NULL) {
            fc_fail(in, len, "refusal %d does not name its line: '%s'", st, why);
        }
    } else {
        if (n != fc_count_lines(in) || n > FC_CAP) {
            fc_fail(in, len, "%zu items from %zu item lines", n, fc_count_lines(in));
        }
        for (size_t i = 0; i < n; i++) {
            const cli_item_spec_t *it = &out[i];

            if (!it->has_pos || (it->n_tokens == 0 && it->src == CLI_ITEM_HASH) ||
                (it->src == CLI_ITEM_GEN &&
                 (it->width == 0 || it->height == 0 || (it->channels != 1 && it->channels != 3))) ||
                (it->src == CLI_ITEM_FILE && it->path[0] == '\0')) {
                fc_fail(in, len, "item %zu accepted out of range", i);
            }
        }
        if (!mutate && !random && n != lines) {
            fc_fail(in, len, "a well-formed file gave %zu items, made %zu", n, lines);
        }
        for (size_t i = n; i < FC_CAP; i++) {
            if (memcmp(&out[i], &before[i], sizeof(out[i])) != 0) {
                fc_fail(in, len, "item %zu past the count was written", i);
            }
        }
    }
    free(in);
}

int main(void)
{
    uint64_t iters = fz_env_u64("STRATA_FUZZ_ITERS", FC_ITERS);
    fz_rng_t r;

    g_seed = fz_seed("fuzz_cli_items");
    fz_rng_init(&r, g_seed, 1);
    for (g_iter = 0; g_iter < iters; g_iter++) {
        fz_log_clear(&g_log);
        if (fz_chance(&r, 60)) {
            fc_one_arg(&r);
        } else {
            fc_one_file(&r);
        }
        fz_arena_reset();
    }
    printf("fuzz_cli_items: %" PRIu64 " inputs, no failure\n", iters);
    return 0;
}
