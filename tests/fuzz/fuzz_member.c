/*
 * fuzz_member.c - the member record parser (proto/member.c), which every
 * daemon and client runs over what etcd hands them (docs/membership.md "The
 * member record"), held to an independent reader of the documented format.
 *
 * Inputs: records written by mr_format() from random fields (names,
 * addresses, states), with byte mutations (fuzz_util.c: flips, cuts,
 * inserts, appends, duplicated chunks), with lines dropped, doubled,
 * reordered, unknown keys, another version, values at and over the limit,
 * and random bytes; each parsed under its own key name or another, from a
 * buffer of exactly its size (the sanitizer build sees any read past it).
 *
 * Oracle: mr_parse() accepts exactly what the reference accepts and gives
 * the same fields; a refusal leaves the output untouched and its reason
 * fits the buffer (also of 0 and 1 bytes). An accepted record formats
 * back with mr_format() and parses to the same member (round trip).
 *
 * Bounds: STRATA_FUZZ_ITERS inputs (default 50,000). The seed is printed;
 * STRATA_TEST_SEED replays it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "member.h"

#define FM_ITERS 50000

static uint64_t g_seed, g_iter;
static fz_log_t g_log;

static void fm_fail(const char *what, const uint8_t *rec, size_t len)
{
    char hex[2 * 256 + 1];

    fz_hex(rec, len < 256 ? len : 256, hex, sizeof(hex));
    fprintf(stderr, "fuzz_member: %s (seed %llu iteration %llu)\nmutations: %s\nrecord: %s\n", what,
            (unsigned long long)g_seed, (unsigned long long)g_iter, g_log.text, hex);
    exit(1);
}

/* The reference reader: the format of member.h, line by line, written apart. */
static int fm_reference(const char *key, const uint8_t *rec, size_t len, mr_member_t *m)
{
    static const char *const keys[] = {"v", "name", "grpc", "transport", "metrics", "state"};
    int seen[6] = {0};
    size_t i = 0;

    memset(m, 0, sizeof(*m));
    if (len > MR_MAX_RECORD) {
        return 0;
    }
    for (size_t k = 0; k < len; k++) {
        if (rec[k] != '\n' && (rec[k] < 0x20 || rec[k] > 0x7e)) {
            return 0;
        }
    }
    while (i < len) {
        size_t start = i, eq = SIZE_MAX;
        char value[MR_MAX_FIELD];
        int which = -1;

        while (i < len && rec[i] != '\n') {
            if (rec[i] == '=' && eq == SIZE_MAX) {
                eq = i;
            }
            i++;
        }
        if (i > start) {
            if (eq == SIZE_MAX) {
                return 0;
            }
            for (int k = 0; k < 6; k++) {
                if (strlen(keys[k]) == eq - start &&
                    memcmp(rec + start, keys[k], eq - start) == 0) {
                    which = k;
                }
            }
            if (which >= 0) {
                if (seen[which]++ || i - eq - 1 >= MR_MAX_FIELD) {
                    return 0;
                }
                memcpy(value, rec + eq + 1, i - eq - 1);
                value[i - eq - 1] = '\0';
                if (which == 0 && strcmp(value, "1") != 0) {
                    return 0;
                }
                if (which == 5) {
                    if (strcmp(value, "joining") == 0) {
                        m->state = MR_JOINING;
                    } else if (strcmp(value, "serving") == 0) {
                        m->state = MR_SERVING;
                    } else if (strcmp(value, "draining") == 0) {
                        m->state = MR_DRAINING;
                    } else {
                        return 0;
                    }
                }
                strcpy(which == 1   ? m->name
                       : which == 2 ? m->grpc
                       : which == 3 ? m->transport
                       : which == 4 ? m->metrics
                                    : (char[MR_MAX_FIELD]){0},
                       value);
            }
        }
        i++; /* the '\n' */
    }
    return seen[0] && seen[1] && seen[2] && seen[5] && strchr(m->grpc, ':') != NULL &&
           strcmp(m->name, key) == 0;
}

static void fm_field(fz_rng_t *r, char *out, size_t max)
{
    static const char alpha[] = "abcxyz0123456789.:-_[]";
    size_t n = fz_chance(r, 5) ? max : fz_below(r, 24);

    for (size_t i = 0; i < n; i++) {
        out[i] = alpha[fz_below(r, sizeof(alpha) - 1)];
    }
    out[n] = '\0';
}

/* A record: mr_format() of random fields, then maybe mutated. */
static uint8_t *fm_input(fz_rng_t *r, char *key, size_t *len_p)
{
    mr_member_t m;
    char buf[MR_MAX_RECORD * 2];
    size_t len;

    memset(&m, 0, sizeof(m));
    fm_field(r, m.name, MR_MAX_FIELD - 1);
    fm_field(r, m.grpc, MR_MAX_FIELD - 1);
    if (fz_chance(r, 80)) {
        snprintf(m.grpc, sizeof(m.grpc), "10.0.0.%u:%u", (unsigned)fz_below(r, 256),
                 (unsigned)fz_below(r, 65536));
    }
    fm_field(r, m.transport, 8);
    fm_field(r, m.metrics, 30);
    m.state = (mr_state_t)fz_below(r, MR_N_STATES);
    len = mr_format(&m, buf, sizeof(buf));
    snprintf(key, MR_MAX_FIELD, "%s", fz_chance(r, 90) ? m.name : "other");
    if (len == 0 || fz_chance(r, 3)) {
        len = fz_below(r, 300);
        fz_fill(r, buf, len);
        fz_logf(&g_log, "random %zu bytes; ", len);
    }
    if (fz_chance(r, 15)) { /* an unknown key, another version, a doubled line */
        const char *extra[] = {"zone=a\n", "v=2\n", "state=serving\n", "noequals\n", "\n\n"};
        const char *x = extra[fz_below(r, 5)];

        if (len + strlen(x) < sizeof(buf)) {
            size_t at = fz_below(r, len + 1);

            memmove(buf + at + strlen(x), buf + at, len - at);
            memcpy(buf + at, x, strlen(x));
            len += strlen(x);
            fz_logf(&g_log, "inserted %s at %zu; ", x, at);
        }
    }
    if (fz_chance(r, 60)) {
        return fz_mutate_bytes(r, (uint8_t *)buf, len, len_p, &g_log);
    }
    *len_p = len;
    return fz_dup(buf, len ? len : 1);
}

static void fm_check(const char *key, const uint8_t *rec, size_t len)
{
    mr_member_t got, want, again;
    char why[160], small[1], formatted[MR_MAX_RECORD + 1];
    int ok_ref = fm_reference(key, rec, len, &want);
    st_status_t st;

    memset(&got, 0x5a, sizeof(got));
    st = mr_parse(key, rec, len, &got, why, sizeof(why));
    if ((st == ST_OK) != ok_ref) {
        fm_fail(st == ST_OK ? "accepted what the reference refuses"
                            : "refused what the reference accepts",
                rec, len);
    }
    if (st != ST_OK) {
        for (size_t i = 0; i < sizeof(got); i++) {
            if (((uint8_t *)&got)[i] != 0x5a) {
                fm_fail("a refusal wrote the output", rec, len);
            }
        }
        if (strnlen(why, sizeof(why)) == sizeof(why)) {
            fm_fail("the reason is not terminated", rec, len);
        }
        small[0] = 0x7f;
        (void)mr_parse(key, rec, len, &got, small, 0);
        if (small[0] != 0x7f) {
            fm_fail("a reason buffer of 0 bytes was written", rec, len);
        }
        (void)mr_parse(key, rec, len, &got, small, 1);
        if (small[0] != '\0') {
            fm_fail("a reason buffer of 1 byte holds more than its NUL", rec, len);
        }
        return;
    }
    if (strcmp(got.name, want.name) || strcmp(got.grpc, want.grpc) ||
        strcmp(got.transport, want.transport) || strcmp(got.metrics, want.metrics) ||
        got.state != want.state) {
        fm_fail("fields differ from the reference's", rec, len);
    }
    len = mr_format(&got, formatted, sizeof(formatted));
    if (len == 0 || mr_parse(key, (uint8_t *)formatted, len, &again, why, sizeof(why)) != ST_OK ||
        strcmp(again.grpc, got.grpc) || strcmp(again.name, got.name) || again.state != got.state) {
        fm_fail("an accepted record does not format and parse back", rec, len);
    }
}

int main(void)
{
    uint64_t iters = fz_env_u64("STRATA_FUZZ_ITERS", FM_ITERS), accepted = 0;
    fz_rng_t r;

    g_seed = fz_seed("fuzz_member");
    fz_rng_init(&r, g_seed, 0);
    for (g_iter = 0; g_iter < iters; g_iter++) {
        char key[MR_MAX_FIELD];
        size_t len;
        uint8_t *in, *exact;
        mr_member_t m;

        fz_log_clear(&g_log);
        in = fm_input(&r, key, &len);
        exact = malloc(len ? len : 1); /* exactly its size: ASan sees an overread */
        memcpy(exact, in, len);
        fm_check(key, exact, len);
        accepted += mr_parse(key, exact, len, &m, NULL, 0) == ST_OK;
        free(exact);
        fz_arena_reset();
    }
    printf("fuzz_member: %llu records, %llu accepted\n", (unsigned long long)iters,
           (unsigned long long)accepted);
    return accepted > 0 && accepted < iters ? 0 : 1;
}
