/* cli.h - the strata command's options and commands (cli.c, cli_cmds.c, cli_bench.c). */
#ifndef STRATA_CLI_H
#define STRATA_CLI_H

#include <stddef.h>
#include <stdint.h>

#include "srpc.h"
#include "st_config.h"
#include "strata/strata.h"

typedef struct cli_conf {
    /* connection */
    char *nodes, *tenant, *model, *token, *transport;
    char *tls_ca, *tls_cert, *tls_key; /* PEM files; "" none */
    int verify_reads;                  /* index into cli_verify_reads */
    int cache_locations;               /* index into cli_cache_locations */
    int transport_calls;               /* Locate, Release, Lookup over the transport */
    int64_t copy_threads;              /* threads that copy a batch's mapped objects */
    uint64_t timeout_ms;
    int64_t replicas;
    int64_t write_quorum; /* W of durable writes (0: replicas) */
    int durable;          /* put, session, bench: durable writes */
    /* tokens */
    char *tokens, *tokens_file;
    int64_t random, seed;
    /* objects */
    int64_t block, layer, layers, fill;
    int kind;
    char *file, *out, *kinds;
    uint64_t ttl_ms;
    /* bench */
    int64_t sessions, turns, prompt_tokens, turn_tokens, kv_bytes, idx_bytes, kda_bytes;
    int64_t verify;
    char *metrics_listen;
    char *metrics_tls_cert, *metrics_tls_key, *metrics_token_file;
    uint64_t metrics_linger_ms;
} cli_conf_t;

typedef struct cli_command {
    const char *name;
    const char *summary;
    const char *args; /* positional arguments for the usage line, or NULL */
    int min_args, max_args;
    int tokens; /* takes the token options */
    const st_cfg_option_t *opts;
    size_t n_opts;
    int (*run)(const cli_conf_t *cf, int argc, char **argv);
} cli_command_t;

extern const cli_command_t cli_commands[];
extern const size_t cli_n_commands;

/* Exit code of a durable write that reached fewer replicas than write_quorum. */
#define CLI_EXIT_PARTIAL 3

/* Connects with the connection options; prints the error. */
st_status_t cli_connect(const cli_conf_t *cf, st_client_t **c_p);

/*
 * Reads the files of --tls-ca, --tls-cert, --tls-key (NULL where not given)
 * into pem[0..3) and points cc's TLS fields at them; prints the error.
 * cli_tls_free() frees them.
 */
st_status_t cli_tls_load(const cli_conf_t *cf, char *pem[3], srpc_channel_config_t *cc);
void cli_tls_free(char *pem[3]);

/* Reads the tokens named by --tokens, --tokens-file or --random. */
st_status_t cli_read_tokens(const cli_conf_t *cf, uint32_t **tok_p, size_t *n_p);

/* Draws a progress bar on stderr when it is a terminal. */
void cli_progress(const char *what, uint64_t done, uint64_t total, uint64_t t0_ns);

/* strata bench (cli_bench.c). */
int cli_bench(const cli_conf_t *cf, int argc, char **argv);

#endif
