/*
 * fuzz_config.h - what the files of test_fuzz_config share (fuzz_config.c:
 * the tables, the reference parser, values, flags, the client file and
 * main; fuzz_config_files.c: mutated config files): the tables, the run's
 * state, the expectation and text records, the functions each calls in the
 * other.
 */
#ifndef STRATA_TEST_FUZZ_CONFIG_H
#define STRATA_TEST_FUZZ_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "daemon.h"
#include "fuzz_util.h"
#include "config.h"
#include "strata/strata.h"

#define FZC_ITERS   4000 /* default rounds */
#define FZC_SECONDS 240  /* default time bound */
#define FZC_LINE    198  /* longest line a config file may have (inih's buffer, less '\n') */
#define FZC_OPTS    64
#define FZC_CLIENT  8 /* one round in FZC_CLIENT also parses a client file */

/* ------------------------------------------------------- the test table -- */

struct fzc_conf {
    char *listen;
    uint64_t size;
    uint64_t dur;
    int64_t n;
    int flag;
    int mode;
    char *token;
    char *only_flag;
};

extern const char *const fzc_modes[];

#define FZC_OFF(m) offsetof(struct fzc_conf, m)
extern const cfg_option_t fzc_options[];
extern const cfg_table_t fzc_table;

/* The keys of libstrata's client file (client/client.c), to mutate its files
 * with; the parse itself runs on the client's own table. */
extern const cfg_option_t fzc_client_options[];
extern const cfg_table_t fzc_client_table;

/* A config struct of either table. */
typedef union fzc_any {
    cd_config_t stratad;
    struct fzc_conf test;
    max_align_t align;
} fzc_any_t;

/* ------------------------------------------------------------- failures -- */

typedef struct fzc_state {
    uint64_t seed;
    uint64_t round;
    const char *what;
    fz_log_t log;
    const char *input; /* the file's text or the flag list, for the report */
    size_t input_len;
    char path[64];
    /* counts */
    uint64_t values, values_ok, files, files_ok, flags, flags_ok, client, client_ok;
    uint64_t long_lines, nuls, indented;
} fzc_state_t;

extern fzc_state_t G;

/* Reports a failure (seed, round, the input as hex and text, how to replay)
 * and exits 1. */
void fzc_fail(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
#define FZC_CHECK(cond, ...) FZ_CHECK_OR(fzc_fail, cond, __VA_ARGS__)

typedef struct fzc_expect {
    int set[FZC_OPTS];
    int64_t v[FZC_OPTS];
    const char *s[FZC_OPTS];
} fzc_expect_t;

/* Text buffer in the arena. */
typedef struct fzc_text {
    char *p;
    size_t len, cap;
} fzc_text_t;

int64_t fzc_num(const cfg_option_t *o, const void *conf);
void fzc_defaults(const cfg_table_t *t, fzc_any_t *c);
void fzc_check_bounds(const cfg_table_t *t, const void *conf);
char *fzc_valid(fz_rng_t *r, const cfg_option_t *o, int64_t *v);
char *fzc_junk(fz_rng_t *r);
void fzc_put(fzc_text_t *t, const char *s, size_t n);
void __attribute__((format(printf, 2, 3))) fzc_putf(fzc_text_t *t, const char *fmt, ...);
const char *fzc_must_refuse(const char *p, size_t len);
void fzc_mutate_file(fz_rng_t *r, const cfg_table_t *t, fzc_text_t *f);
void fzc_write(const char *text, size_t len);
void fzc_check_expect(const cfg_table_t *t, const void *conf, const fzc_expect_t *e);
void fzc_file(fz_rng_t *r, const cfg_table_t *t);

#endif
