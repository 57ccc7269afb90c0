/*
 * cli.c - the `strata` command: status, hash, lookup, put, get, delete, the
 * session commands and bench, against a cluster named by --nodes or a
 * config file. Every command takes --help; options come from one table per
 * command: the connection flags, which are libstrata's own option table
 * (client_options.h: the same keys, defaults and limits as its config file),
 * then the token options, then the command's own.
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
#include "clock.h"
#include "config.h"
#include "log.h"

#define CLI_OFF(m) offsetof(cli_conf_t, m)

const cfg_option_t cli_tokens_opts[] = {
    {"tokens", CFG_STRING, CLI_OFF(tokens), "", 0, 0, 0, NULL, 0, "token ids, comma separated"},
    {"tokens_file", CFG_STRING, CLI_OFF(tokens_file), "", 0, 0, 0, NULL, 0,
     "file of token ids separated by spaces, commas or newlines"},
    {"random", CFG_INT, CLI_OFF(random), "0", 0, 1ll << 26, 0, NULL, 0,
     "use this many pseudo-random tokens instead"},
    {"seed", CFG_INT, CLI_OFF(seed), "1", 0, INT64_MAX, 0, NULL, 0,
     "seed of the pseudo-random tokens"},
    /* Non-text items in the chain (cli_items.h, docs/hashing.md). */
    {"image", CFG_STRING, CLI_OFF(images), "", 0, 0, CFG_REPEAT, NULL, 0,
     "FILE@POS[:LEN]: a PGM/PPM or PNG image whose tokens start at position POS (LEN tokens, "
     "default ceil(W/patch)*ceil(H/patch)); repeatable; put/get --kind vis: FILE alone"},
    {"gen_image", CFG_STRING, CLI_OFF(gen_images), "", 0, 0, CFG_REPEAT, NULL, 0,
     "W,H,SEED[,C]@POS[:LEN]: a generated image (C channels, 1 or 3, default 3) as --image; "
     "repeatable"},
    {"items", CFG_STRING, CLI_OFF(items_file), "", 0, 0, 0, NULL, 0,
     "file of items, a line each: SOURCE START LENGTH (SOURCE: 32 hex digits, gen:W,H,SEED or "
     "an image file; LENGTH: tokens or auto)"},
    {"patch", CFG_INT, CLI_OFF(patch), "16", 1, 1024, 0, NULL, 0,
     "pixels per side of an image token: an image's default LEN"},
};
const size_t cli_tokens_n = sizeof(cli_tokens_opts) / sizeof(cli_tokens_opts[0]);

/* Builds the table of a command: the connection flags, then the token options, then its own. */
static cfg_option_t *cli_table(const cli_command_t *cmd, cfg_table_t *t, char *prog,
                               size_t prog_len)
{
    size_t n = sc_n_options + cmd->n_opts + (cmd->tokens ? cli_tokens_n : 0);
    cfg_option_t *opts = calloc(n, sizeof(*opts));
    size_t nc;

    if (opts == NULL) {
        return NULL;
    }
    nc = sc_options_flags(opts, CLI_OFF(conn));
    if (cmd->tokens) {
        memcpy(opts + nc, cli_tokens_opts, sizeof(cli_tokens_opts));
        nc += cli_tokens_n;
    }
    if (cmd->n_opts > 0) {
        memcpy(opts + nc, cmd->opts, sizeof(*opts) * cmd->n_opts);
        nc += cmd->n_opts;
    }
    snprintf(prog, prog_len, "strata %s", cmd->name);
    t->program = prog;
    t->summary = cmd->summary;
    t->args_usage = cmd->args;
    t->options = opts;
    t->n_options = nc;
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

/* --------------------------------------------------------------- main -- */

int main(int argc, char **argv)
{
    const cli_command_t *cmd = NULL;
    cfg_table_t table;
    cfg_option_t *opts;
    cli_conf_t cf;
    char prog[64], err[512];
    int npos = 0, help = 0, rc;
    st_status_t status;

    lg_set_ident("strata");
    lg_set_level(LG_WARN);
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
    cfg_defaults(&table, &cf);
    status = cfg_parse_args(&table, &cf, argc - 1, argv + 1, &npos, &help, err, sizeof(err));
    if (status != ST_OK) {
        fprintf(stderr, "%s: %s\n", prog, err);
        rc = 2;
    } else if (help) {
        cfg_usage(&table, stdout);
        rc = 0;
    } else if (npos < cmd->min_args || npos > cmd->max_args) {
        fprintf(stderr, "%s: expected %s (see %s --help)\n", prog,
                cmd->args ? cmd->args : "no arguments", prog);
        rc = 2;
    } else {
        rc = cmd->run(&cf, npos, argv + 2);
    }
    cfg_free(&table, &cf);
    free(opts);
    return rc;
}
