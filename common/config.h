/*
 * config.h - one declarative table per program drives the INI file
 * parser, the command-line flags, --help and docs/configuration.md.
 *
 * A program describes its settings as an array of cfg_option_t, each
 * naming a member of the program's config struct by offset. Then:
 *
 *   cfg_defaults()    fills the struct with every default;
 *   cfg_parse_args()  loads the file named by --config (if any), then
 *                           applies the flags, which win over the file;
 *   cfg_usage()       prints --help, cfg_markdown() the docs page.
 *
 * Keys are written with underscores in the file (memory_limit = 4G) and with
 * dashes as flags (--memory-limit 4G or --memory-limit=4G). The file may hold
 * the keys at the top or in a section named after the program ([stratad]).
 *
 * Errors name what was wrong and where: an unknown key names the key and
 * file:line, a value of the wrong kind names the kind expected, a value out of
 * range names the bounds. A file line that starts with white space (other than
 * a comment), is longer than 198 bytes or holds a NUL byte is an error too,
 * never a continuation, a value cut short or a tail read as another line. On
 * error the message goes into the caller's buffer; nothing is logged, so the
 * caller chooses how to report it.
 *
 * Values:
 *   bool      true/false, yes/no, on/off, 1/0
 *   int       decimal integer
 *   size      bytes with an optional binary suffix K, M, G, T (4G = 4 GiB)
 *   duration  milliseconds with a unit: ms, s, m, h, d (plain numbers are ms)
 *   string    the text as written (quotes, if any, are removed)
 *   enum      one of the names listed in the option
 *
 * Thread safety: none; configure before starting threads.
 */
#ifndef STRATA_CONFIG_H
#define STRATA_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "strata/status.h"

typedef enum cfg_type {
    CFG_BOOL,     /* int member, 0 or 1 */
    CFG_INT,      /* int64_t member */
    CFG_SIZE,     /* uint64_t member, bytes */
    CFG_DURATION, /* uint64_t member, milliseconds */
    CFG_STRING,   /* char * member, owned by the config (cfg_free) */
    CFG_ENUM      /* int member, index into the option's enum_names */
} cfg_type_t;

enum {
    CFG_SENSITIVE = 1u << 0, /* never printed (tokens, secrets) */
    CFG_NOFILE = 1u << 1,    /* only as a flag (for example --config) */
    CFG_REPEAT = 1u << 2,    /* CFG_STRING: each occurrence adds a line ("a\nb"), not replaces */
};

typedef struct cfg_option {
    const char *name; /* key with underscores: "memory_limit" */
    cfg_type_t type;
    size_t offset;      /* offsetof(program config, member) */
    const char *defval; /* default as text, NULL for none */
    int64_t min, max;   /* bounds for int, size and duration */
    unsigned flags;
    const char *const *enum_names; /* NULL-terminated, for CFG_ENUM */
    char short_flag;               /* single-letter flag, or 0 */
    const char *help;              /* one sentence */
} cfg_option_t;

typedef struct cfg_table {
    const char *program;    /* "stratad" */
    const char *summary;    /* one line under the usage line */
    const char *args_usage; /* positional arguments for usage, or NULL */
    const cfg_option_t *options;
    size_t n_options;
} cfg_table_t;

/* Fills conf with every option's default. Returns ST_OK or ST_ERR_NOMEM. */
st_status_t cfg_defaults(const cfg_table_t *table, void *conf);

/*
 * Sets the option called name (underscores or dashes) from text. where names
 * the source for messages ("stratad.ini:12" or "--memory-limit").
 * Returns ST_OK; ST_ERR_NOT_FOUND for an unknown key; ST_ERR_INVALID for a
 * malformed or out-of-range value; ST_ERR_NOMEM. On error err holds the
 * message and conf is unchanged.
 */
st_status_t cfg_set(const cfg_table_t *table, void *conf, const char *name, const char *text,
                    const char *where, char *err, size_t errlen);

/*
 * Loads an INI file into conf. Returns ST_OK; ST_ERR_IO when the file cannot
 * be opened (the message names the path and the reason); ST_ERR_NOT_FOUND or
 * ST_ERR_INVALID for the first bad line (file:line in the message). On error
 * options set by earlier lines of the file keep their new values; callers
 * treat a failed load as fatal.
 */
st_status_t cfg_load_file(const cfg_table_t *table, void *conf, const char *path, char *err,
                          size_t errlen);

/*
 * Parses argv: --config FILE (or -c FILE) is loaded first wherever it stands,
 * then every other flag in order. "--" ends the flags. Positional arguments
 * are moved to the front of argv[1..]; *n_positional_p receives their count.
 * *help_p is set to 1 when -h or --help was given (nothing else is checked
 * after that). Returns ST_OK or the status of the first error, with err set.
 */
st_status_t cfg_parse_args(const cfg_table_t *table, void *conf, int argc, char **argv,
                           int *n_positional_p, int *help_p, char *err, size_t errlen);

/* Prints the usage text generated from the table. */
void cfg_usage(const cfg_table_t *table, FILE *out);

/* Prints the table as a Markdown section for docs/configuration.md. */
void cfg_markdown(const cfg_table_t *table, FILE *out);

/* Writes the value of one option in the table's syntax into buf. */
void cfg_format(const cfg_option_t *opt, const void *conf, char *buf, size_t len);

/* Frees the strings held by conf. */
void cfg_free(const cfg_table_t *table, void *conf);

/*
 * The start of a program's main over table (whose program names it in
 * messages): zeroes conf (conf_size bytes), fills it with the defaults, then
 * from argv; prints the usage for --help, or the Markdown page when the
 * environment variable markdown_env is set. Returns -1 when the program goes
 * on with conf; else its exit code, with conf freed: 0 after the usage or the
 * page, 1 for a default that does not parse (a bug) or no memory, 2 for a
 * usage error (a bad flag or a positional argument; said on stderr).
 */
int cfg_main(const cfg_table_t *table, void *conf, size_t conf_size, int argc, char **argv,
             const char *markdown_env);

/* Parses a size ("64M") into bytes. Returns ST_OK or ST_ERR_INVALID. */
st_status_t cfg_parse_size(const char *text, uint64_t *bytes_p);

/* Parses a duration ("5s") into milliseconds. Returns ST_OK or ST_ERR_INVALID. */
st_status_t cfg_parse_duration(const char *text, uint64_t *ms_p);

#endif /* STRATA_CONFIG_H */
