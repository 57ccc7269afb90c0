/* cli_metrics.h - the client's own metrics, served by `strata bench --metrics-listen`. */
#ifndef STRATA_CLI_METRICS_H
#define STRATA_CLI_METRICS_H

#include <stdint.h>

#include "metrics.h"
#include "metrics_http.h"

typedef struct cli_metrics cli_metrics_t;

/*
 * Serves /metrics and /stats on listen (host:port) with the namespace label
 * ns; over HTTPS with the PEM files cert and key, behind the bearer token of
 * token_file (each NULL or "": not used).
 */
st_status_t cli_metrics_start(const char *listen, const char *ns, const char *cert, const char *key,
                              const char *token_file, cli_metrics_t **m_p, int *port_p);
/* One composed lookup: tokens asked, matched and resumable, its time in ns. NULL: no-op. */
void cli_metrics_lookup(cli_metrics_t *m, uint64_t tokens, uint64_t matched, uint64_t resumable,
                        uint64_t ns);
/* Bytes read and written. NULL: no-op. */
void cli_metrics_bytes(cli_metrics_t *m, uint64_t fetched, uint64_t stored);
void cli_metrics_stop(cli_metrics_t *m);

#endif
