/*
 * runner.h - strata-engine, the engine's command: its settings (runner.c) and
 * its own Prometheus view (runner_metrics.c, docs/observability.md
 * "strata_engine_*").
 */
#ifndef STRATA_RUNNER_H
#define STRATA_RUNNER_H

#include <stddef.h>
#include <stdint.h>

#include "image.h"
#include "strata/engine.h"

typedef struct rn_metrics rn_metrics_t;

/* ---- images of the turns (runner_images.c) ------------------------------ */

/* An image of the workload: a file for one turn (turn >= 1, at text
 * position pos), or a generated one in every turn (turn 0). */
typedef struct rn_image {
    im_image_t im;
    unsigned turn;
    uint64_t pos;
} rn_image_t;

typedef struct rn_images {
    rn_image_t *v;
    size_t n, cap;
    size_t gen_n;              /* generated images per turn */
    st_engine_image_t *placed; /* every image placed so far, at its conversation position */
    size_t n_placed, cap_placed;
} rn_images_t;

/*
 * Loads the images of --image (files: comma-separated FILE@POS or
 * FILE@TURN:POS, POS a position in the turn's text tokens) and makes
 * gen_n generated images of gen_size ("WxH") from gen_seed, seed + k for
 * the k-th. Returns 0, 1 (no memory) or 2 (a usage error, printed: the
 * file and what is wrong with it, a bad size, a turn past turns).
 */
int rn_images_load(rn_images_t *set, const char *files, int64_t gen_n, const char *gen_size,
                   int64_t gen_seed, int64_t turns);
void rn_images_free(rn_images_t *set);

/*
 * Appends one user turn to the session: the add text tokens with the
 * turn's images inserted at their positions (the generated ones evenly:
 * image k of N after (k + 1) * add / (N + 1) text tokens). *n_images gets
 * how many. Returns 0 or 1 (printed).
 */
int rn_images_append(rn_images_t *set, st_engine_session_t *sess, unsigned turn,
                     const uint32_t *text, size_t add, size_t *n_images);

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
