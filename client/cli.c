/*
 * cli.c - the `strata` command: status, hash, lookup, put, get, delete, the
 * session commands and bench, against a cluster named by --nodes or a
 * config file. Every command takes --help; options come from one table per
 * command (the shared connection options plus the command's own).
 *
 * Exit codes: 0 success; 1 the cluster answered with an error or a check
 * failed; 2 a usage error; 3 a durable write reached fewer replicas than
 * --write-quorum (it is stored, with a weaker guarantee than asked).
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
#include "st_config.h"
#include "st_log.h"

#define CLI_OFF(m) offsetof(cli_conf_t, m)

static const char *const cli_verify_reads[] = {"lease", "always", NULL};
static const char *const cli_cache_locations[] = {"rows", "all", NULL};

static const st_cfg_option_t cli_common[] = {
    {"nodes", ST_CFG_STRING, CLI_OFF(nodes), "127.0.0.1:7700", 0, 0, 0, NULL, 'n',
     "the cluster's nodes, host:port,host:port"},
    {"tenant", ST_CFG_STRING, CLI_OFF(tenant), "default", 0, 0, 0, NULL, 0, "tenant name"},
    {"model", ST_CFG_STRING, CLI_OFF(model), "default", 0, 0, 0, NULL, 0, "model name"},
    {"token", ST_CFG_STRING, CLI_OFF(token), "", 0, 0, ST_CFG_SENSITIVE, NULL, 0,
     "authentication token"},
    {"timeout", ST_CFG_DURATION, CLI_OFF(timeout_ms), "5s", 10, 600000, 0, NULL, 0,
     "deadline of one call"},
    {"replicas", ST_CFG_INT, CLI_OFF(replicas), "0", 0, 16, 0, NULL, 0,
     "copies of KDA and SESSION objects (0: the cluster's, from Hello)"},
    {"write_quorum", ST_CFG_INT, CLI_OFF(write_quorum), "0", 0, 16, 0, NULL, 0,
     "replicas that must commit a --durable write to disk (0: all of --replicas); fewer "
     "exits with 3"},
    {"transport", ST_CFG_STRING, CLI_OFF(transport), "inline", 0, 0, 0, NULL, 0,
     "how object bytes move: inline (in the control plane), ucx, libfabric[:provider]"},
    {"verify_reads", ST_CFG_ENUM, CLI_OFF(verify_reads), "lease", 0, 0, 0, cli_verify_reads, 0,
     "one-sided reads of whole objects: lease (bytes that landed under the Locate's lease "
     "count; later ones are checked by XXH3-64) or always (every object is checked)"},
    {"cache_locations", ST_CFG_ENUM, CLI_OFF(cache_locations), "rows", 0, 0, 0, cli_cache_locations,
     0,
     "which one-sided reads reuse their lease's location without a Locate: rows or all "
     "(whole objects too)"},
    {"transport_calls", ST_CFG_BOOL, CLI_OFF(transport_calls), "true", 0, 0, 0, NULL, 0,
     "with a transport: Locate, Release and Lookup over it to daemons that serve them (false: "
     "over gRPC)"},
    {"copy_threads", ST_CFG_INT, CLI_OFF(copy_threads), "2", 1, 16, 0, NULL, 0,
     "threads that copy a large batch's objects where the transport maps the daemons' memory "
     "(ucx, same host); 1: the batch's own thread alone"},
    {"tls_ca", ST_CFG_STRING, CLI_OFF(tls_ca), "", 0, 0, 0, NULL, 0,
     "PEM file of the CA of the daemons' certificates: talk TLS (empty: plaintext)"},
    {"tls_cert", ST_CFG_STRING, CLI_OFF(tls_cert), "", 0, 0, 0, NULL, 0,
     "PEM file of a client certificate, for daemons that ask for one (needs --tls-ca)"},
    {"tls_key", ST_CFG_STRING, CLI_OFF(tls_key), "", 0, 0, 0, NULL, 0,
     "PEM file of --tls-cert's private key"},
};

const st_cfg_option_t cli_tokens_opts[] = {
    {"tokens", ST_CFG_STRING, CLI_OFF(tokens), "", 0, 0, 0, NULL, 0, "token ids, comma separated"},
    {"tokens_file", ST_CFG_STRING, CLI_OFF(tokens_file), "", 0, 0, 0, NULL, 0,
     "file of token ids separated by spaces, commas or newlines"},
    {"random", ST_CFG_INT, CLI_OFF(random), "0", 0, 1ll << 26, 0, NULL, 0,
     "use this many pseudo-random tokens instead"},
    {"seed", ST_CFG_INT, CLI_OFF(seed), "1", 0, INT64_MAX, 0, NULL, 0,
     "seed of the pseudo-random tokens"},
};
const size_t cli_tokens_n = sizeof(cli_tokens_opts) / sizeof(cli_tokens_opts[0]);

/* Builds the table of a command: the common options, then its own. */
static st_cfg_option_t *cli_table(const cli_command_t *cmd, st_cfg_table_t *t, char *prog,
                                  size_t prog_len)
{
    size_t nc = sizeof(cli_common) / sizeof(cli_common[0]);
    size_t n = nc + cmd->n_opts + (cmd->tokens ? cli_tokens_n : 0);
    st_cfg_option_t *opts = calloc(n, sizeof(*opts));

    if (opts == NULL) {
        return NULL;
    }
    memcpy(opts, cli_common, sizeof(cli_common));
    if (cmd->tokens) {
        memcpy(opts + nc, cli_tokens_opts, sizeof(cli_tokens_opts));
        nc += cli_tokens_n;
    }
    if (cmd->n_opts > 0) {
        memcpy(opts + nc, cmd->opts, sizeof(*opts) * cmd->n_opts);
    }
    snprintf(prog, prog_len, "strata %s", cmd->name);
    t->program = prog;
    t->summary = cmd->summary;
    t->args_usage = cmd->args;
    t->options = opts;
    t->n_options = n;
    return opts;
}

static void cli_usage(FILE *out)
{
    fprintf(out, "Usage: strata COMMAND [options]\n"
                 "The command-line client of a strata cache cluster.\n\nCommands:\n");
    for (size_t i = 0; i < cli_n_commands; i++) {
        fprintf(out, "  %-16s %s\n", cli_commands[i].name, cli_commands[i].summary);
    }
    fprintf(out, "\n'strata COMMAND --help' lists a command's options. Connection options "
                 "(--nodes, --tenant, --model, --token) may also come from a file given by "
                 "--config.\nExit codes: 0 success, 1 error from the cluster or a failed "
                 "check, 2 usage error, 3 a durable write reached fewer replicas than "
                 "--write-quorum.\n");
}

/* ------------------------------------------------------------ helpers -- */

st_status_t cli_connect(const cli_conf_t *cf, st_client_t **c_p)
{
    st_client_params_t p = {0};
    st_status_t status;

    p.field_mask = ST_CLIENT_FIELD_NODES | ST_CLIENT_FIELD_TENANT | ST_CLIENT_FIELD_MODEL |
                   ST_CLIENT_FIELD_TOKEN | ST_CLIENT_FIELD_TIMEOUT | ST_CLIENT_FIELD_REPLICAS |
                   ST_CLIENT_FIELD_TRANSPORT | ST_CLIENT_FIELD_VERIFY_READS |
                   ST_CLIENT_FIELD_CACHE_LOCATIONS | ST_CLIENT_FIELD_TRANSPORT_CALLS |
                   ST_CLIENT_FIELD_COPY_THREADS | ST_CLIENT_FIELD_WRITE_QUORUM;
    p.copy_threads = (uint32_t)cf->copy_threads;
    p.transport = cf->transport;
    p.transport_calls = cf->transport_calls;
    p.verify_reads = cli_verify_reads[cf->verify_reads];
    p.cache_locations = cli_cache_locations[cf->cache_locations];
    p.nodes = cf->nodes;
    p.tenant = cf->tenant;
    p.model = cf->model;
    p.token = cf->token;
    p.timeout_ms = (uint32_t)cf->timeout_ms;
    p.replicas = (uint32_t)cf->replicas;
    p.write_quorum = (uint32_t)cf->write_quorum;
    p.field_mask |= ST_CLIENT_FIELD_TLS_CA | ST_CLIENT_FIELD_TLS_CERT | ST_CLIENT_FIELD_TLS_KEY;
    p.tls_ca = cf->tls_ca;
    p.tls_cert = cf->tls_cert;
    p.tls_key = cf->tls_key;
    status = st_client_connect(&p, c_p);
    if (status != ST_OK) {
        fprintf(stderr, "strata: cannot connect to %s: %s (%s)\n", cf->nodes,
                st_client_last_error(), st_strerror(status));
    }
    return status;
}

st_status_t cli_tls_load(const cli_conf_t *cf, char *pem[3], srpc_channel_config_t *cc)
{
    const char *path[3] = {cf->tls_ca, cf->tls_cert, cf->tls_key};
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
        FILE *f = fopen(cf->tokens_file, "r");
        long len;

        if (f == NULL || fseek(f, 0, SEEK_END) != 0 || (len = ftell(f)) < 0) {
            fprintf(stderr, "strata: cannot read --tokens-file %s\n", cf->tokens_file);
            if (f != NULL) {
                fclose(f);
            }
            return ST_ERR_IO;
        }
        rewind(f);
        file_text = calloc(1, (size_t)len + 1);
        if (file_text == NULL || fread(file_text, 1, (size_t)len, f) != (size_t)len) {
            fclose(f);
            free(file_text);
            fprintf(stderr, "strata: cannot read --tokens-file %s\n", cf->tokens_file);
            return ST_ERR_IO;
        }
        fclose(f);
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
    struct timespec ts;
    uint64_t now;
    int width = 30, filled;

    if (!isatty(STDERR_FILENO) || total == 0) {
        return;
    }
    clock_gettime(CLOCK_MONOTONIC, &ts);
    now = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
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

/* --------------------------------------------------------------- main -- */

int main(int argc, char **argv)
{
    const cli_command_t *cmd = NULL;
    st_cfg_table_t table;
    st_cfg_option_t *opts;
    cli_conf_t cf;
    char prog[64], err[512];
    int npos = 0, help = 0, rc;
    st_status_t status;

    st_log_set_ident("strata");
    st_log_set_level(ST_LOG_WARN);
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        cli_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (size_t i = 0; i < cli_n_commands; i++) {
        if (strcmp(argv[1], cli_commands[i].name) == 0) {
            cmd = &cli_commands[i];
        }
    }
    if (cmd == NULL) {
        fprintf(stderr, "strata: unknown command '%s' (see strata --help)\n", argv[1]);
        return 2;
    }
    opts = cli_table(cmd, &table, prog, sizeof(prog));
    if (opts == NULL) {
        fprintf(stderr, "strata: out of memory\n");
        return 1;
    }
    memset(&cf, 0, sizeof(cf));
    st_config_defaults(&table, &cf);
    status = st_config_parse_args(&table, &cf, argc - 1, argv + 1, &npos, &help, err, sizeof(err));
    if (status != ST_OK) {
        fprintf(stderr, "%s: %s\n", prog, err);
        rc = 2;
    } else if (help) {
        st_config_usage(&table, stdout);
        rc = 0;
    } else if (npos < cmd->min_args || npos > cmd->max_args) {
        fprintf(stderr, "%s: expected %s (see %s --help)\n", prog,
                cmd->args ? cmd->args : "no arguments", prog);
        rc = 2;
    } else {
        rc = cmd->run(&cf, npos, argv + 2);
    }
    st_config_free(&table, &cf);
    free(opts);
    return rc;
}
