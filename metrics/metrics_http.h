/*
 * metrics_http.h - the observability HTTP server (libmicrohttpd).
 *
 *   GET /metrics    Prometheus text, format 0.0.4            (token, when set)
 *   GET /stats      JSON, schema 1 of docs/observability.md  (token, when set)
 *   GET /dashboard  the built-in HTML dashboard (metrics/dashboard.html)
 *   GET /healthz    "ok"
 *
 * HEAD is accepted wherever GET is; OPTIONS answers a CORS preflight; any
 * other method gets 405 with an Allow header, any other path 404. The server
 * binds to loopback unless told otherwise and answers from libmicrohttpd's
 * own thread (or thread pool).
 *
 * Security. With tls_cert_pem and tls_key_pem the server speaks HTTPS only
 * (GnuTLS inside libmicrohttpd). With a token, /metrics and /stats answer
 * 401 with "WWW-Authenticate: Bearer" unless the request carries
 * "Authorization: Bearer <token>" (compared in constant time). No response
 * carries "Access-Control-Allow-Origin: *": a browser may read /stats from
 * the page's own origin, or from the origins listed in cors_origins (the
 * request's Origin is echoed back when it is one of them). A bind address
 * that is not loopback (127.0.0.0/8, ::1) is refused unless TLS or a token
 * is set.
 *
 * Thread safety: start and stop from one thread; mx_http_port() from
 * any thread while the server runs.
 */
#ifndef STRATA_METRICS_HTTP_H
#define STRATA_METRICS_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include "metrics.h"

typedef struct mx_http mx_http_t;

typedef struct mx_http_opts {
    const char *bind_addr;    /* IPv4 or IPv6 literal; NULL means "127.0.0.1" */
    uint16_t port;            /* 0: the kernel picks; read it with mx_http_port() */
    unsigned threads;         /* 0 or 1: one polling thread; more: a thread pool */
    mx_stats_opts_t stats;    /* node name, peers and hook for /stats (copied) */
    const char *tls_cert_pem; /* PEM certificate chain: HTTPS (copied); NULL: HTTP */
    const char *tls_key_pem;  /* its PEM private key, unencrypted (copied) */
    const char *token;        /* bearer token for /metrics and /stats; NULL or "": none */
    const char *cors_origins; /* "https://a:9101,https://b:9101": origins that may read
                                      /stats from a browser; NULL or "": same origin only */
} mx_http_opts_t;

/* The dashboard page, generated at build time from metrics/dashboard.html. */
extern const char mx_dashboard_html[];
extern const size_t mx_dashboard_html_len;

/*
 * Starts serving metrics (which must outlive the server) and writes the
 * server to *http_p. opts may be NULL (loopback, port 0, one thread).
 * Returns:
 *   ST_OK
 *   ST_ERR_INVALID  bind_addr is not an IP literal; a non-loopback bind_addr
 *                   without TLS or a token; a certificate without a key or a
 *                   key without a certificate; a certificate or key GnuTLS
 *                   refuses (all logged)
 *   ST_ERR_UNSUPPORTED  TLS asked for, but libmicrohttpd was built without it
 *   ST_ERR_IO       the socket could not be bound (port in use; logged with the errno)
 *   ST_ERR_NOMEM    allocation failed
 */
st_status_t mx_http_start(mx_metrics_t *metrics, const mx_http_opts_t *opts, mx_http_t **http_p);

/* The files behind a server's TLS and token options (mx_http_load()). */
typedef struct mx_http_files {
    char *cert, *key, *token; /* malloc'd; NULL: not given */
} mx_http_files_t;

/*
 * Reads the PEM files cert_path and key_path and the token file token_path
 * (its one line, trailing white space dropped) into *files, and points
 * opts->tls_cert_pem, tls_key_pem and token at them. A NULL or "" path is
 * not read (and leaves its opts field alone). For programs that take
 * --metrics-tls-cert, --metrics-tls-key, --metrics-token-file.
 * Returns ST_OK; ST_ERR_IO (cannot read; logged with the file name);
 * ST_ERR_INVALID (a token file that is empty or has several lines, a file
 * over 1 MiB; logged); ST_ERR_NOMEM. On failure *files holds nothing.
 * Free with mx_http_files_free() after mx_http_stop().
 */
st_status_t mx_http_load(const char *cert_path, const char *key_path, const char *token_path,
                         mx_http_files_t *files, mx_http_opts_t *opts);
void mx_http_files_free(mx_http_files_t *files);

/* A program's own metrics server (strata bench, strata-engine): its registry,
 * the server, and the files behind --metrics-tls-cert, -key, --metrics-token-file. */
typedef struct mx_server {
    mx_metrics_t *reg;
    mx_http_t *http;
    mx_http_files_t files;
} mx_server_t;

/*
 * Loads the files (mx_http_load) into s->files and serves s->reg on
 * host:port, /stats naming node, into s->http. Returns as
 * mx_http_load, then as mx_http_start; stop s with
 * mx_server_stop() whatever the outcome.
 */
st_status_t mx_http_serve(mx_server_t *s, const char *host, uint16_t port, const char *node,
                          const char *cert_path, const char *key_path, const char *token_path);

/* Stops the server, frees the files and destroys the registry of s (any of them unset). */
void mx_server_stop(mx_server_t *s);

/*
 * Replaces the certificate and key of an HTTPS server (for SIGHUP): the
 * server stops accepting on its socket, a new libmicrohttpd daemon with the
 * new PEM strings (copied) accepts on the same socket, and requests in flight
 * finish on the old one. Same port, no moment without a listener.
 * Returns ST_OK; ST_ERR_INVALID for an HTTP server, a NULL argument, or a
 * certificate GnuTLS refuses (logged; the old certificate stays in use);
 * ST_ERR_NOMEM; ST_ERR_INTERNAL when the socket cannot be handed over (or,
 * after a refused certificate, not taken back: the server is then down).
 * Call it from the thread that started the server, not concurrently with
 * mx_http_stop().
 */
st_status_t mx_http_reload_tls(mx_http_t *http, const char *cert_pem, const char *key_pem);

/* Returns the port the server is bound to (the real one when 0 was asked). */
uint16_t mx_http_port(const mx_http_t *http);

/* Stops the server, waiting for requests in flight, and frees it. NULL is a no-op. */
void mx_http_stop(mx_http_t *http);

#endif /* STRATA_METRICS_HTTP_H */
