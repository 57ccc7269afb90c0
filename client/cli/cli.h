/* cli.h - the strata command's options and commands: main (cli.c) over the commands
 * (cli_cmds.c, cli_bench.c) over what they share (cli_io.c). */
#ifndef STRATA_CLI_H
#define STRATA_CLI_H

#include <stddef.h>
#include <stdint.h>

#include "cli_items.h"
#include "client_options.h"
#include "srpc.h"
#include "config.h"
#include "strata/strata.h"

typedef struct cli_conf {
    sc_options_t conn; /* the connection flags: client_options.h's table */
    int durable;       /* put, session, bench: durable writes */
    /* tokens */
    char *tokens, *tokens_file;
    int64_t random, seed;
    /* objects */
    int64_t block, layer, layers, fill;
    int kind;
    char *file, *out, *kinds;
    /* items of hash, put, get (cli_items.h) */
    char *images, *gen_images, *items_file;
    int64_t patch;
    uint64_t ttl_ms;
    /* bench */
    int64_t sessions, turns, prompt_tokens, turn_tokens, kv_bytes, idx_bytes, kda_bytes;
    int64_t verify;
    char *metrics_listen;
    char *metrics_tls_cert, *metrics_tls_key, *metrics_token_file;
    uint64_t metrics_linger_ms;
    /* load (cli_load.c; sessions, layers, kv_bytes, kda_bytes and seed as bench's) */
    int64_t engines, processes, rate, row_bytes, get_blocks, rows_blocks, rows_per_block;
    int64_t big_tokens;
    uint64_t duration_ms, warmup_ms;
    char *mix, *mix_sessions, *report, *peer;
    int big_load, fail_on_error;
} cli_conf_t;

typedef struct cli_command {
    const char *name;
    const char *summary;
    const char *args; /* positional arguments for the usage line, or NULL */
    int min_args, max_args;
    int tokens; /* takes the token options */
    const cfg_option_t *opts;
    size_t n_opts;
    int (*run)(const cli_conf_t *cf, int argc, char **argv);
} cli_command_t;

extern const cli_command_t cli_commands[];
extern const size_t cli_n_commands;

/* Exit code of a durable write that reached fewer replicas than write_quorum. */
#define CLI_EXIT_PARTIAL 3

/* --- cli_io.c ------------------------------------------------------------ */

/* Connects with the connection options; prints the error. */
st_status_t cli_connect(const cli_conf_t *cf, st_client_t **c_p);

/*
 * Reads the files of --tls-ca, --tls-cert, --tls-key (NULL where not given)
 * into pem[0..3) and points cc's TLS fields at them; prints the error.
 * cli_tls_free() frees them.
 */
st_status_t cli_tls_load(const cli_conf_t *cf, char *pem[3], srpc_channel_config_t *cc);
void cli_tls_free(char *pem[3]);

/*
 * Reads the whole file path into *text_p (NUL-terminated, the caller frees it)
 * and its length into *len_p. Returns ST_OK; ST_ERR_NOT_FOUND when it cannot
 * be opened or sized; ST_ERR_IO when it cannot be read (or no memory). Prints
 * nothing.
 */
st_status_t cli_read_file(const char *path, char **text_p, size_t *len_p);

/* Reads the tokens named by --tokens, --tokens-file or --random. */
st_status_t cli_read_tokens(const cli_conf_t *cf, uint32_t **tok_p, size_t *n_p);

/*
 * The bytes an object of (block hash, kind, layer) holds in `strata bench`
 * and `strata load`: a deterministic stream from the key, so that a reader
 * checks what it got byte by byte without keeping what was written.
 */
void cli_fill(uint8_t *buf, size_t len, const st_hash_t *h, int kind, int layer);

/* Draws a progress bar on stderr when it is a terminal. */
void cli_progress(const char *what, uint64_t done, uint64_t total, uint64_t t0_ns);

/* strata metrics: every node's hits and misses per object kind (cli_kinds.c). */
int cli_kinds_cmd(const cli_conf_t *cf, int argc, char **argv);

/* strata bench and its options (cli_bench.c). */
int cli_bench(const cli_conf_t *cf, int argc, char **argv);
#define CLI_BENCH_N_OPTS 16
extern const cfg_option_t cli_bench_opts[CLI_BENCH_N_OPTS];

/* strata load and its options (cli_load.c). */
int cli_load(const cli_conf_t *cf, int argc, char **argv);
#define CLI_LOAD_N_OPTS 21
extern const cfg_option_t cli_load_opts[CLI_LOAD_N_OPTS];

#endif
