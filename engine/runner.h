/*
 * runner.h - strata-engine, the engine's command: its settings (runner.c) and
 * its own Prometheus view (runner_metrics.c, docs/observability.md
 * "strata_engine_*").
 */
#ifndef STRATA_RUNNER_H
#define STRATA_RUNNER_H

#include <stddef.h>
#include <stdint.h>

#include "strata/engine.h"

typedef struct rn_metrics rn_metrics_t;

/*
 * Serves /metrics, /stats and /dashboard on listen (host:port; port 0 picks
 * one, written to *port_p), every series labelled namespace = ns, created
 * at zero; over HTTPS with the PEM files cert and key and behind the bearer
 * token of token_file (each NULL or "": not used). Returns ST_OK;
 * ST_ERR_INVALID (listen is not host:port: the message is printed; a
 * non-loopback address without TLS or a token, a bad file: logged);
 * ST_ERR_IO (the port cannot be bound, a file unreadable); ST_ERR_NOMEM.
 */
st_status_t rn_metrics_start(const char *listen, const char *ns, const char *cert, const char *key,
                             const char *token_file, rn_metrics_t **m_p, int *port_p);

/*
 * Counts one turn: prompt tokens, what st_engine_run reported, n_decode
 * decoded tokens, block_tokens per block. NULL: no-op.
 */
void rn_metrics_turn(rn_metrics_t *m, size_t prompt, const st_engine_stats_t *st, uint32_t n_decode,
                     uint32_t block_tokens);

/* Stops the server and frees everything. NULL is fine. */
void rn_metrics_stop(rn_metrics_t *m);

#endif
