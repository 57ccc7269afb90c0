/*
 * cli_load_report.c - `strata load`'s report: a table on stdout and, with
 * --report FILE, the same numbers as JSON (docs/cli.md names every field).
 */
#include <inttypes.h>
#include <string.h>

#include "cli_load.h"

static double load_rate(uint64_t n, uint64_t ns)
{
    return ns ? (double)n / ((double)ns / 1e9) : 0.0;
}

static double load_frac(uint64_t a, uint64_t b)
{
    return b ? (double)a / (double)b : 0.0;
}

static uint64_t load_total(const load_stats_t *st)
{
    uint64_t n = 0;

    for (int k = 0; k < LK_BIG_GET; k++) {
        n += st->k[k].count; /* the engines' calls, on their schedules: big_get is apart */
    }
    return n;
}

/* The name of error slot e (-status). */
static const char *load_err_name(int e)
{
    return e == LOAD_N_STATUS - 1 ? "other" : st_status_name((st_status_t)-e);
}

uint64_t load_hard_errors(const load_stats_t *st)
{
    uint64_t n = 0;

    for (int k = 0; k < LK_N; k++) {
        for (int e = 1; e < LOAD_N_STATUS; e++) {
            const char *name = load_err_name(e);

            if (strcmp(name, "ST_ERR_OVERLOADED") != 0 && strcmp(name, "ST_ERR_EXHAUSTED") != 0) {
                n += st->errors[k][e];
            }
        }
    }
    return n;
}

void load_report_text(FILE *out, const load_conf_t *lc, const load_stats_t *st, const char *backend)
{
    uint64_t total = load_total(st);

    fprintf(out,
            "\nstrata load against %s: %d engines, offered %.0f ops/s, achieved %.1f ops/s "
            "over %.1f s (%" PRIu64 " calls)\n",
            backend, lc->engines, lc->rate, load_rate(total, st->elapsed),
            (double)st->elapsed / 1e9, total);
    fprintf(out, "%-8s %9s %9s %10s %10s %10s %10s %12s\n", "call", "count", "ok", "p50_us",
            "p99_us", "p999_us", "max_us", "MB");
    for (int k = 0; k < LK_N; k++) {
        const load_kind_stats_t *ks = &st->k[k];

        if (ks->count == 0 && k == LK_BIG_GET) {
            continue;
        }
        fprintf(out, "%-8s %9" PRIu64 " %9" PRIu64 " %10.1f %10.1f %10.1f %10.1f %12.1f\n",
                load_kind_names[k], ks->count, ks->ok,
                (double)load_hist_quantile(&ks->lat, 0.50) / 1e3,
                (double)load_hist_quantile(&ks->lat, 0.99) / 1e3,
                (double)load_hist_quantile(&ks->lat, 0.999) / 1e3, (double)ks->lat.max_ns / 1e3,
                (double)ks->bytes / 1e6);
    }
    fprintf(out,
            "lookup block hit rate %.1f%% (%" PRIu64 " of %" PRIu64 "), get object hit rate "
            "%.1f%% (%" PRIu64 " of %" PRIu64 ")\n",
            100.0 * load_frac(st->lookup_hit, st->lookup_asked), st->lookup_hit, st->lookup_asked,
            100.0 * load_frac(st->get_hit, st->get_asked), st->get_hit, st->get_asked);
    for (int e = 1; e < LOAD_N_STATUS; e++) {
        uint64_t n = 0;

        for (int k = 0; k < LK_N; k++) {
            n += st->errors[k][e];
        }
        if (n > 0) {
            fprintf(out, "errors %s: %" PRIu64 "\n", load_err_name(e), n);
        }
    }
    fprintf(out, "wrong bytes: %" PRIu64 "\n", st->wrong_bytes);
}

/* "errors": {"ST_ERR_X": n, ...} of kind k, or of every kind with k = LK_N. */
static void load_json_errors(FILE *f, const load_stats_t *st, int k)
{
    int first = 1;

    fprintf(f, "{");
    for (int e = 1; e < LOAD_N_STATUS; e++) {
        uint64_t n = 0;

        for (int i = 0; i < LK_N; i++) {
            n += (k == LK_N || k == i) ? st->errors[i][e] : 0;
        }
        if (n > 0) {
            fprintf(f, "%s\"%s\": %" PRIu64, first ? "" : ", ", load_err_name(e), n);
            first = 0;
        }
    }
    fprintf(f, "}");
}

int load_report_json(const char *path, const load_conf_t *lc, const load_stats_t *st,
                     const char *backend)
{
    FILE *f = fopen(path, "w");
    uint64_t total = load_total(st);

    if (f == NULL) {
        fprintf(stderr, "strata load: cannot write the report %s\n", path);
        return -1;
    }
    fprintf(f,
            "{\n  \"backend\": \"%s\",\n  \"engines\": %d,\n  \"processes\": %d,\n"
            "  \"big_load\": %s,\n  \"duration_s\": %.3f,\n  \"warmup_s\": %.3f,\n"
            "  \"offered_rate\": %.3f,\n  \"achieved_rate\": %.3f,\n  \"calls\": %" PRIu64
            ",\n  \"issued\": %" PRIu64 ",\n  \"kinds\": {\n",
            backend, lc->engines, lc->processes, lc->big_tokens ? "true" : "false",
            (double)st->elapsed / 1e9, (double)lc->warmup_ns / 1e9, lc->rate,
            load_rate(total, st->elapsed), total, st->issued);
    for (int k = 0; k < LK_N; k++) {
        const load_kind_stats_t *ks = &st->k[k];

        fprintf(f,
                "    \"%s\": {\"count\": %" PRIu64 ", \"ok\": %" PRIu64 ", \"p50_us\": %.1f, "
                "\"p99_us\": %.1f, \"p999_us\": %.1f, \"max_us\": %.1f, \"bytes\": %" PRIu64
                ", \"errors\": ",
                load_kind_names[k], ks->count, ks->ok,
                (double)load_hist_quantile(&ks->lat, 0.50) / 1e3,
                (double)load_hist_quantile(&ks->lat, 0.99) / 1e3,
                (double)load_hist_quantile(&ks->lat, 0.999) / 1e3, (double)ks->lat.max_ns / 1e3,
                ks->bytes);
        load_json_errors(f, st, k);
        fprintf(f, "}%s\n", k + 1 < LK_N ? "," : "");
    }
    fprintf(f,
            "  },\n  \"hit_rates\": {\"lookup_blocks_asked\": %" PRIu64
            ", \"lookup_blocks_hit\": %" PRIu64
            ", \"lookup\": %.6f, \"get_objects_asked\": %" PRIu64 ", \"get_objects_hit\": %" PRIu64
            ", \"get\": %.6f},\n  \"errors\": ",
            st->lookup_asked, st->lookup_hit, load_frac(st->lookup_hit, st->lookup_asked),
            st->get_asked, st->get_hit, load_frac(st->get_hit, st->get_asked));
    load_json_errors(f, st, LK_N);
    fprintf(f, ",\n  \"wrong_bytes\": %" PRIu64 "\n}\n", st->wrong_bytes);
    if (fclose(f) != 0) {
        fprintf(stderr, "strata load: cannot write the report %s\n", path);
        return -1;
    }
    return 0;
}
