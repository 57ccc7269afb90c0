/*
 * http.c - /metrics, /stats, /dashboard and /healthz over libmicrohttpd.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <microhttpd.h>

#include "log.h"
#include "metrics_http.h"

#define MX_HTTP_MAX_CONNECTIONS 64
#define MX_HTTP_TIMEOUT_S       10

struct mx_http {
    mx_metrics_t *metrics;
    struct MHD_Daemon *daemon;
    uint16_t port;
    char *node;
    char *peers;
    char *cert, *key; /* HTTPS; NULL: HTTP */
    char *token;      /* NULL: no token asked for */
    size_t token_len;
    char *cors; /* ",origin,origin,"; NULL: same origin only */
    mx_stats_opts_t stats;
    struct sockaddr_storage ss; /* what the first daemon bound */
    int is_v6;
    unsigned threads;
};

static void mx_http_log(void *cls, const char *fmt, va_list ap)
{
    char line[256];
    vsnprintf(line, sizeof(line), fmt, ap);
    size_t n = strlen(line);
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) {
        line[--n] = '\0';
    }
    lg_warn_ratelimited("http server: %s", line);
}

/* Queues a response and drops our reference to it. */
static enum MHD_Result mx_send(struct MHD_Connection *conn, unsigned code,
                               struct MHD_Response *resp, const char *content_type)
{
    if (resp == NULL) {
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    enum MHD_Result r = MHD_queue_response(conn, code, resp);
    MHD_destroy_response(resp);
    return r;
}

static enum MHD_Result mx_send_static(struct MHD_Connection *conn, unsigned code, const char *text,
                                      const char *content_type)
{
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_PERSISTENT);
    return mx_send(conn, code, resp, content_type);
}

/*
 * The request's Origin when it is one of the configured cors origins, else
 * NULL (no Origin, or one that may not read; the browser then refuses the
 * page's cross-origin read, and same-origin pages need no header).
 */
static const char *mx_cors_origin(const mx_http_t *h, struct MHD_Connection *conn)
{
    const char *origin = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Origin");
    size_t n;
    const char *p;

    if (h->cors == NULL || origin == NULL || (n = strlen(origin)) == 0 ||
        strchr(origin, ',') != NULL) {
        return NULL;
    }
    for (p = strstr(h->cors, origin); p != NULL; p = strstr(p + 1, origin)) {
        if (p[-1] == ',' && p[n] == ',') {
            return origin;
        }
    }
    return NULL;
}

static void mx_add_cors(struct MHD_Response *resp, const char *origin)
{
    MHD_add_response_header(resp, "Vary", "Origin");
    if (origin != NULL) {
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ACCESS_CONTROL_ALLOW_ORIGIN, origin);
    }
}

/* Constant-time: the time depends on the length of the token we hold only. */
static int mx_token_ok(const mx_http_t *h, struct MHD_Connection *conn)
{
    static const char bearer[] = "Bearer ";
    const char *v = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");
    size_t got_len;
    unsigned char diff;

    if (h->token == NULL) {
        return 1;
    }
    if (v == NULL || strncasecmp(v, bearer, sizeof(bearer) - 1) != 0) {
        return 0;
    }
    v += sizeof(bearer) - 1;
    got_len = strlen(v);
    diff = got_len != h->token_len;
    for (size_t i = 0; i < h->token_len; i++) {
        diff |= (unsigned char)(h->token[i] ^ (i < got_len ? v[i] : 0));
    }
    return diff == 0;
}

/* 401 for /metrics or /stats without the token (CORS headers so a page can see it). */
static enum MHD_Result mx_send_unauthorized(struct MHD_Connection *conn, const char *origin)
{
    static const char text[] = "401 unauthorized: send Authorization: Bearer <metrics_token>\n";
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(sizeof(text) - 1, (void *)text, MHD_RESPMEM_PERSISTENT);

    if (resp != NULL) {
        MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE,
                                "Bearer realm=\"strata metrics\"");
        mx_add_cors(resp, origin);
    }
    return mx_send(conn, MHD_HTTP_UNAUTHORIZED, resp, "text/plain; charset=utf-8");
}

/* OPTIONS: the preflight of a page that sends Authorization to /stats. */
static enum MHD_Result mx_send_preflight(struct MHD_Connection *conn, const char *origin)
{
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);

    if (resp != NULL) {
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, "GET, HEAD, OPTIONS");
        mx_add_cors(resp, origin);
        if (origin != NULL) {
            MHD_add_response_header(resp, "Access-Control-Allow-Methods", "GET, HEAD");
            MHD_add_response_header(resp, "Access-Control-Allow-Headers", "Authorization");
            MHD_add_response_header(resp, "Access-Control-Max-Age", "600");
        }
    }
    return mx_send(conn, MHD_HTTP_NO_CONTENT, resp, "text/plain; charset=utf-8");
}

/* Sends a built buffer; libmicrohttpd frees it with free() once sent. */
static enum MHD_Result mx_send_buf(struct MHD_Connection *conn, mx_mbuf_t *b,
                                   const char *content_type, const char *cors_origin, int cors)
{
    if (b->err != ST_OK) {
        mx_mbuf_free(b);
        return mx_send_static(conn, MHD_HTTP_SERVICE_UNAVAILABLE, "out of memory\n",
                              "text/plain; charset=utf-8");
    }
    struct MHD_Response *resp = MHD_create_response_from_buffer_with_free_callback(
        b->len, b->data ? b->data : (char *)"", b->data ? free : NULL);
    if (resp == NULL) {
        mx_mbuf_free(b);
        return MHD_NO;
    }
    if (cors) {
        mx_add_cors(resp, cors_origin);
    }
    return mx_send(conn, MHD_HTTP_OK, resp, content_type);
}

static enum MHD_Result mx_handle(void *cls, struct MHD_Connection *conn, const char *url,
                                 const char *method, const char *version, const char *upload_data,
                                 size_t *upload_data_size, void **con_cls)
{
    mx_http_t *h = cls;
    int known = strcmp(url, "/metrics") == 0 || strcmp(url, "/stats") == 0 ||
                strcmp(url, "/dashboard") == 0 || strcmp(url, "/healthz") == 0;
    if (!known) {
        return mx_send_static(conn, MHD_HTTP_NOT_FOUND, "not found\n", "text/plain; charset=utf-8");
    }
    int guarded = strcmp(url, "/metrics") == 0 || strcmp(url, "/stats") == 0;
    const char *origin = guarded ? mx_cors_origin(h, conn) : NULL;
    if (guarded && strcmp(method, MHD_HTTP_METHOD_OPTIONS) == 0) {
        return mx_send_preflight(conn, origin);
    }
    if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0) {
        struct MHD_Response *resp = MHD_create_response_from_buffer(
            strlen("method not allowed\n"), (void *)"method not allowed\n", MHD_RESPMEM_PERSISTENT);
        if (resp != NULL) {
            MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW,
                                    guarded ? "GET, HEAD, OPTIONS" : "GET, HEAD");
        }
        return mx_send(conn, MHD_HTTP_METHOD_NOT_ALLOWED, resp, "text/plain; charset=utf-8");
    }
    if (guarded && !mx_token_ok(h, conn)) {
        return mx_send_unauthorized(conn, origin);
    }
    if (strcmp(url, "/healthz") == 0) {
        return mx_send_static(conn, MHD_HTTP_OK, "ok\n", "text/plain; charset=utf-8");
    }
    if (strcmp(url, "/dashboard") == 0) {
        struct MHD_Response *resp = MHD_create_response_from_buffer(
            mx_dashboard_html_len, (void *)mx_dashboard_html, MHD_RESPMEM_PERSISTENT);
        return mx_send(conn, MHD_HTTP_OK, resp, "text/html; charset=utf-8");
    }
    mx_mbuf_t b = {0};
    if (strcmp(url, "/metrics") == 0) {
        mx_write_text(h->metrics, &b);
        return mx_send_buf(conn, &b, "text/plain; version=0.0.4; charset=utf-8", origin, 0);
    }
    mx_write_stats(h->metrics, &h->stats, &b);
    return mx_send_buf(conn, &b, "application/json", origin, 1);
}

/* Parses bind_addr and port into *ss; returns ST_ERR_INVALID if it is no IP literal. */
static st_status_t mx_parse_addr(const char *addr, uint16_t port, struct sockaddr_storage *ss,
                                 int *is_v6)
{
    memset(ss, 0, sizeof(*ss));
    struct sockaddr_in *v4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)ss;
    if (inet_pton(AF_INET, addr, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons(port);
        *is_v6 = 0;
        return ST_OK;
    }
    if (inet_pton(AF_INET6, addr, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons(port);
        *is_v6 = 1;
        return ST_OK;
    }
    lg_error("metrics http: bind address is not an IPv4 or IPv6 literal addr=%s", addr);
    return ST_ERR_INVALID;
}

/* True for 127.0.0.0/8, ::1 and ::ffff:127.0.0.0/104. */
static int mx_is_loopback(const struct sockaddr_storage *ss)
{
    if (ss->ss_family == AF_INET) {
        return (ntohl(((const struct sockaddr_in *)ss)->sin_addr.s_addr) >> 24) == 127;
    }
    const struct in6_addr *a = &((const struct sockaddr_in6 *)ss)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
}

static void mx_http_free(mx_http_t *h)
{
    free(h->peers);
    free(h->node);
    free(h->cert);
    free(h->key);
    if (h->token != NULL) {
        memset(h->token, 0, h->token_len);
    }
    free(h->token);
    free(h->cors);
    free(h);
}

/* Checks and copies the security options into h (logged on failure). */
static st_status_t mx_http_security(mx_http_t *h, const mx_http_opts_t *opts, const char *addr,
                                    const struct sockaddr_storage *ss)
{
    int tls = opts->tls_cert_pem != NULL || opts->tls_key_pem != NULL;
    int token = opts->token != NULL && opts->token[0] != '\0';

    if (tls && (opts->tls_cert_pem == NULL || opts->tls_key_pem == NULL)) {
        lg_error("metrics http: HTTPS needs a certificate and its key (only the %s is set)",
                 opts->tls_cert_pem != NULL ? "certificate" : "key");
        return ST_ERR_INVALID;
    }
    if (tls && MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES) {
        lg_error("metrics http: this libmicrohttpd was built without TLS (GnuTLS): HTTPS is not "
                 "available addr=%s",
                 addr);
        return ST_ERR_UNSUPPORTED;
    }
    if (!mx_is_loopback(ss) && !tls && !token) {
        lg_error("metrics http: refusing to serve /metrics and /stats on a non-loopback address "
                 "in the clear and without a token addr=%s: set a TLS certificate and key, or a "
                 "bearer token, or bind to 127.0.0.1",
                 addr);
        return ST_ERR_INVALID;
    }
    if (tls && ((h->cert = strdup(opts->tls_cert_pem)) == NULL ||
                (h->key = strdup(opts->tls_key_pem)) == NULL)) {
        return ST_ERR_NOMEM;
    }
    if (token) {
        h->token_len = strlen(opts->token);
        if ((h->token = strdup(opts->token)) == NULL) {
            return ST_ERR_NOMEM;
        }
    }
    if (opts->cors_origins != NULL && opts->cors_origins[0] != '\0') {
        size_t n = strlen(opts->cors_origins);

        if (strcmp(opts->cors_origins, "*") == 0) {
            lg_error("metrics http: a wildcard CORS origin (*) is not allowed: list the "
                     "dashboard origins, e.g. https://node1:9101");
            return ST_ERR_INVALID;
        }
        if ((h->cors = malloc(n + 3)) == NULL) {
            return ST_ERR_NOMEM;
        }
        h->cors[0] = ',';
        memcpy(h->cors + 1, opts->cors_origins, n);
        h->cors[n + 1] = ',';
        h->cors[n + 2] = '\0';
        for (char *p = h->cors; *p != '\0'; p++) {
            *p = *p == ' ' ? ',' : *p; /* "a, b" lists too */
        }
    }
    return ST_OK;
}

/*
 * Starts a libmicrohttpd daemon for h: HTTPS with cert and key when cert is
 * not NULL; on listen_fd when it is a socket (a reload takes over the old
 * daemon's), else bound to h->ss and port. NULL on failure (errno, or
 * GnuTLS's complaint on the log).
 */
static struct MHD_Daemon *mx_daemon_start(mx_http_t *h, const char *cert, const char *key,
                                          uint16_t port, MHD_socket listen_fd)
{
    /* ITC: a reload quiesces the old daemon to hand its socket over. */
    unsigned flags =
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_USE_ERROR_LOG | MHD_USE_ITC;
    if (h->is_v6) {
        flags |= MHD_USE_IPv6;
    }
    if (cert != NULL) {
        flags |= MHD_USE_TLS;
    }
    /* The logger goes first so that every later complaint reaches lg_log. */
    struct MHD_OptionItem items[8] = {
        {MHD_OPTION_EXTERNAL_LOGGER, (intptr_t)mx_http_log, NULL},
        {MHD_OPTION_CONNECTION_LIMIT, MX_HTTP_MAX_CONNECTIONS, NULL},
        {MHD_OPTION_CONNECTION_TIMEOUT, MX_HTTP_TIMEOUT_S, NULL},
    };
    size_t n = 3;
    if (listen_fd != MHD_INVALID_SOCKET) {
        items[n++] = (struct MHD_OptionItem){MHD_OPTION_LISTEN_SOCKET, (intptr_t)listen_fd, NULL};
    } else {
        items[n++] = (struct MHD_OptionItem){MHD_OPTION_SOCK_ADDR, 0, &h->ss};
    }
    if (h->threads > 1) {
        items[n++] =
            (struct MHD_OptionItem){MHD_OPTION_THREAD_POOL_SIZE, (intptr_t)h->threads, NULL};
    }
    if (cert != NULL) {
        items[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_CERT, 0, (void *)cert};
        items[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_KEY, 0, (void *)key};
    }
    items[n] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
    return MHD_start_daemon(flags, port, NULL, NULL, mx_handle, h, MHD_OPTION_ARRAY, items,
                            MHD_OPTION_END);
}

st_status_t mx_http_start(mx_metrics_t *metrics, const mx_http_opts_t *opts, mx_http_t **http_p)
{
    static const mx_http_opts_t defaults = {0};
    if (opts == NULL) {
        opts = &defaults;
    }
    const char *addr = opts->bind_addr ? opts->bind_addr : "127.0.0.1";
    struct sockaddr_storage ss;
    int is_v6;
    st_status_t st = mx_parse_addr(addr, opts->port, &ss, &is_v6);
    if (st != ST_OK) {
        return st;
    }
    mx_http_t *h = calloc(1, sizeof(*h));
    if (h == NULL) {
        lg_error("metrics http: out of memory");
        return ST_ERR_NOMEM;
    }
    h->metrics = metrics;
    h->stats = opts->stats;
    h->node = strdup(opts->stats.node ? opts->stats.node : "");
    h->peers = strdup(opts->stats.peers ? opts->stats.peers : "");
    if (h->node == NULL || h->peers == NULL) {
        mx_http_free(h);
        lg_error("metrics http: out of memory");
        return ST_ERR_NOMEM;
    }
    h->stats.node = h->node;
    h->stats.peers = h->peers;
    st = mx_http_security(h, opts, addr, &ss);
    if (st != ST_OK) {
        if (st == ST_ERR_NOMEM) {
            lg_error("metrics http: out of memory");
        }
        mx_http_free(h);
        return st;
    }

    h->ss = ss;
    h->is_v6 = is_v6;
    h->threads = opts->threads;
    errno = 0;
    h->daemon = mx_daemon_start(h, h->cert, h->key, opts->port, MHD_INVALID_SOCKET);
    if (h->daemon == NULL) {
        int err = errno;
        if (h->cert != NULL && err == 0) {
            lg_error("metrics http: cannot start HTTPS addr=%s port=%u: GnuTLS refused the "
                     "certificate or key (the line above says why)",
                     addr, (unsigned)opts->port);
            mx_http_free(h);
            return ST_ERR_INVALID;
        }
        lg_error("metrics http: cannot start the server addr=%s port=%u errno=%d (%s)", addr,
                 (unsigned)opts->port, err, err ? strerror(err) : "unknown");
        mx_http_free(h);
        return ST_ERR_IO;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(h->daemon, MHD_DAEMON_INFO_BIND_PORT);
    h->port = info != NULL ? info->port : opts->port;
    lg_info("metrics http listening addr=%s port=%u scheme=%s token=%s cors=%s", addr,
            (unsigned)h->port, h->cert ? "https" : "http", h->token ? "required" : "none",
            h->cors ? opts->cors_origins : "same-origin");
    *http_p = h;
    return ST_OK;
}

/* Reads path into *out (NUL-terminated); one_line: strip trailing white space, one line only. */
static st_status_t mx_read_file(const char *path, int one_line, char **out)
{
    FILE *f = fopen(path, "rb");
    char *buf;
    size_t n;

    if (f == NULL) {
        lg_error("metrics http: cannot open file=%s: %s", path, strerror(errno));
        return ST_ERR_IO;
    }
    buf = malloc((1u << 20) + 1);
    if (buf == NULL) {
        fclose(f);
        return ST_ERR_NOMEM;
    }
    n = fread(buf, 1, 1u << 20, f);
    if (ferror(f) || (n == 1u << 20 && fgetc(f) != EOF) || memchr(buf, '\0', n) != NULL) {
        lg_error("metrics http: cannot read file=%s (an error, over 1 MiB, or NUL bytes)", path);
        fclose(f);
        free(buf);
        return ST_ERR_INVALID;
    }
    fclose(f);
    buf[n] = '\0';
    if (one_line) {
        while (n > 0 && strchr(" \t\r\n", buf[n - 1]) != NULL) {
            buf[--n] = '\0';
        }
        if (n == 0 || strpbrk(buf, "\r\n") != NULL) {
            lg_error("metrics http: the token file must hold one non-empty line file=%s", path);
            free(buf);
            return ST_ERR_INVALID;
        }
    }
    *out = buf;
    return ST_OK;
}

st_status_t mx_http_load(const char *cert_path, const char *key_path, const char *token_path,
                         mx_http_files_t *files, mx_http_opts_t *opts)
{
    st_status_t st = ST_OK;

    memset(files, 0, sizeof(*files));
    if (cert_path != NULL && cert_path[0] != '\0') {
        st = mx_read_file(cert_path, 0, &files->cert);
    }
    if (st == ST_OK && key_path != NULL && key_path[0] != '\0') {
        st = mx_read_file(key_path, 0, &files->key);
    }
    if (st == ST_OK && token_path != NULL && token_path[0] != '\0') {
        st = mx_read_file(token_path, 1, &files->token);
    }
    if (st != ST_OK) {
        mx_http_files_free(files);
        return st;
    }
    opts->tls_cert_pem = files->cert ? files->cert : opts->tls_cert_pem;
    opts->tls_key_pem = files->key ? files->key : opts->tls_key_pem;
    opts->token = files->token ? files->token : opts->token;
    return ST_OK;
}

st_status_t mx_http_serve(mx_server_t *s, const char *host, uint16_t port, const char *node,
                          const char *cert_path, const char *key_path, const char *token_path)
{
    mx_http_opts_t opts = {0};
    st_status_t st;

    opts.bind_addr = host;
    opts.port = port;
    opts.stats.node = node;
    st = mx_http_load(cert_path, key_path, token_path, &s->files, &opts);
    if (st == ST_OK) {
        st = mx_http_start(s->reg, &opts, &s->http);
    }
    return st;
}

void mx_server_stop(mx_server_t *s)
{
    mx_http_stop(s->http);
    mx_http_files_free(&s->files);
    mx_destroy(s->reg);
    memset(s, 0, sizeof(*s));
}

void mx_http_files_free(mx_http_files_t *files)
{
    if (files->token != NULL) {
        memset(files->token, 0, strlen(files->token));
    }
    free(files->cert);
    free(files->key);
    free(files->token);
    memset(files, 0, sizeof(*files));
}

/* Frees a new certificate and key that GnuTLS refused and says so; ST_ERR_INVALID. */
static st_status_t mx_tls_refused(const mx_http_t *h, char *cert, char *key)
{
    free(cert);
    free(key);
    lg_error("metrics http: GnuTLS refused the new certificate or key (the line above says "
             "why); the old one stays port=%u",
             (unsigned)h->port);
    return ST_ERR_INVALID;
}

st_status_t mx_http_reload_tls(mx_http_t *h, const char *cert_pem, const char *key_pem)
{
    char *cert, *key;
    struct MHD_Daemon *old = h->daemon, *nd;
    MHD_socket fd;

    if (h->cert == NULL) {
        lg_error("metrics http: the server speaks HTTP: no certificate to reload port=%u",
                 (unsigned)h->port);
        return ST_ERR_INVALID;
    }
    if (cert_pem == NULL || key_pem == NULL) {
        lg_error("metrics http: a certificate reload needs the certificate and the key");
        return ST_ERR_INVALID;
    }
    cert = strdup(cert_pem);
    key = strdup(key_pem);
    if (cert == NULL || key == NULL) {
        free(cert);
        free(key);
        lg_error("metrics http: out of memory for the new certificate");
        return ST_ERR_NOMEM;
    }
    /* GnuTLS checks the pair in a daemon without a socket first, so that a
     * bad pair never touches the serving one. */
    struct MHD_OptionItem probe_items[] = {
        {MHD_OPTION_EXTERNAL_LOGGER, (intptr_t)mx_http_log, NULL},
        {MHD_OPTION_HTTPS_MEM_CERT, 0, cert},
        {MHD_OPTION_HTTPS_MEM_KEY, 0, key},
        {MHD_OPTION_END, 0, NULL},
    };
    struct MHD_Daemon *probe =
        MHD_start_daemon(MHD_USE_NO_LISTEN_SOCKET | MHD_USE_TLS | MHD_USE_ERROR_LOG, 0, NULL, NULL,
                         mx_handle, h, MHD_OPTION_ARRAY, probe_items, MHD_OPTION_END);
    if (probe == NULL) {
        return mx_tls_refused(h, cert, key);
    }
    MHD_stop_daemon(probe);
    /*
     * The old daemon stops accepting and hands its socket over (connections
     * it holds run to their end); a new daemon with the new certificate
     * accepts on it. Should that fail all the same, a daemon with the old
     * certificate takes the socket instead.
     */
    fd = MHD_quiesce_daemon(old);
    if (fd == MHD_INVALID_SOCKET) {
        free(cert);
        free(key);
        lg_error("metrics http: cannot hand the socket over for a reload port=%u",
                 (unsigned)h->port);
        return ST_ERR_INTERNAL;
    }
    nd = mx_daemon_start(h, cert, key, 0, fd);
    if (nd == NULL) {
        mx_tls_refused(h, cert, key);
        nd = mx_daemon_start(h, h->cert, h->key, 0, fd);
        if (nd == NULL) {
            lg_error("metrics http: cannot serve again with the old certificate: the metrics "
                     "server is down port=%u",
                     (unsigned)h->port);
            close(fd);
            MHD_stop_daemon(old);
            h->daemon = NULL;
            return ST_ERR_INTERNAL;
        }
        h->daemon = nd;
        MHD_stop_daemon(old);
        return ST_ERR_INVALID;
    }
    h->daemon = nd;
    MHD_stop_daemon(old);
    free(h->cert);
    free(h->key);
    h->cert = cert;
    h->key = key;
    lg_info("metrics http: new TLS certificate port=%u", (unsigned)h->port);
    return ST_OK;
}

uint16_t mx_http_port(const mx_http_t *h)
{
    return h->port;
}

void mx_http_stop(mx_http_t *h)
{
    if (h == NULL) {
        return;
    }
    if (h->daemon != NULL) {
        MHD_stop_daemon(h->daemon);
    }
    mx_http_free(h);
}
