/*
 * client_options.h - the one table of libstrata's settings.
 *
 * Every client setting is one row of sc_option_table: its key (name, type,
 * default, limits, help, as config.h reads them, over sc_options_t), the
 * st_client_params_t member and field_mask bit that set it, and whether the
 * `strata` command offers it as a flag. From that row come:
 *
 *   sc_options_load()    the settings of st_client_connect(): defaults, then
 *                        the params' config_file, then the params' fields;
 *   sc_options_flags()   the connection flags of every `strata` command (and
 *                        so their --help);
 *   sc_options_params()  the params that pass those flags to st_client_connect().
 *
 * Thread safety: none needed; the table is constant.
 */
#ifndef STRATA_CLIENT_OPTIONS_H
#define STRATA_CLIENT_OPTIONS_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "strata/strata.h"

/* The client's settings, one member a row of sc_option_table. Strings are owned. */
typedef struct sc_options {
    char *nodes, *tenant, *model, *token, *transport;
    char *tls_ca, *tls_cert, *tls_key; /* PEM files; "" none */
    char *etcd, *etcd_prefix;          /* membership on etcd; "" the nodes list */
    int64_t replicas, vnodes, write_quorum, copy_threads;
    uint64_t timeout_ms, health_interval_ms;
    int verify_reads;    /* index into the row's enum_names: lease, always */
    int cache_locations; /* rows, all */
    int transport_calls; /* Locate, Release, Lookup over the transport */
} sc_options_t;

enum sc_option_flags {
    SC_OPT_CLI = 1u << 0,         /* also a flag of every `strata` command */
    SC_OPT_EMPTY_UNSET = 1u << 1, /* a NULL or "" parameter leaves the file's value */
    SC_OPT_CHECK_PARAM = 1u << 2, /* a parameter is checked against the key's min..max */
};

typedef struct sc_option {
    cfg_option_t key;       /* the file key, over sc_options_t */
    uint64_t field;         /* its ST_CLIENT_FIELD_* bit */
    size_t param;           /* offsetof(st_client_params_t, its member) */
    unsigned flags;         /* enum sc_option_flags */
    const char *cli_defval; /* the command's default where it differs, else NULL */
} sc_option_t;

extern const sc_option_t sc_option_table[];
extern const size_t sc_n_options;

/*
 * Fills *o from the defaults, the file params->config_file (with
 * ST_CLIENT_FIELD_CONFIG_FILE) and the fields of params named by its
 * field_mask, which win. Returns ST_OK; ST_ERR_IO, ST_ERR_NOT_FOUND or
 * ST_ERR_INVALID for the file (the message names file:line); ST_ERR_INVALID
 * for a parameter out of its values; ST_ERR_NOMEM. The message is set
 * (st_client_last_error()). On error *o holds nothing to free.
 */
st_status_t sc_options_load(const st_client_params_t *params, sc_options_t *o);

/* Frees the strings of *o (those taken are NULL). */
void sc_options_free(sc_options_t *o);

/*
 * Writes the flags of the `strata` command (the SC_OPT_CLI rows, with their
 * command defaults) into out, which has room for sc_n_options, as keys over
 * a struct that holds an sc_options_t at conn_offset. Returns their count.
 */
size_t sc_options_flags(cfg_option_t *out, size_t conn_offset);

/* Sets the params member and field_mask bit of every SC_OPT_CLI row from *o. */
void sc_options_params(const sc_options_t *o, st_client_params_t *params);

#endif /* STRATA_CLIENT_OPTIONS_H */
