/*
 * test_metrics_http.c - the observability HTTP server on loopback: routes,
 * status codes, headers, port 0, bind errors, the bearer token, CORS (never
 * a wildcard) and the refusal of a non-loopback address in the clear. HTTPS
 * is tested through stratad (tests/integration/test_metrics_tls.py).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include "st_log.h"
#include "st_metrics_http.h"

/* Sends one HTTP/1.0 request with extra header lines ("K: v\r\n...") and returns the reply. */
static char *http_h(uint16_t port, const char *method, const char *path, const char *headers)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(port)};
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
    char req[512];
    int n = snprintf(req, sizeof(req), "%s %s HTTP/1.0\r\nHost: 127.0.0.1\r\n%s\r\n", method, path,
                     headers);
    assert_int_equal(write(fd, req, (size_t)n), n);
    size_t cap = 1 << 20, len = 0;
    char *buf = calloc(1, cap);
    assert_non_null(buf);
    ssize_t r;
    while ((r = read(fd, buf + len, cap - 1 - len)) > 0) {
        len += (size_t)r;
    }
    close(fd);
    return buf;
}

static char *http(uint16_t port, const char *method, const char *path)
{
    return http_h(port, method, path, "");
}

typedef struct {
    st_metrics_t *m;
    st_metrics_http_t *h;
    uint16_t port;
} fixture_t;

static void hook(st_json_t *j, void *arg)
{
    st_json_key(j, "module");
    st_json_string(j, arg);
}

static int setup(void **state)
{
    fixture_t *fx = calloc(1, sizeof(*fx));
    st_metric_family_t *f;
    st_counter_t *c;
    assert_int_equal(st_metrics_create(&fx->m), ST_OK);
    st_metric_desc_t d = {.name = "strata_lookups_total",
                          .help = "Lookups.",
                          .type = ST_METRIC_COUNTER,
                          .label_names = ST_LABELS("namespace"),
                          .n_labels = 1};
    assert_int_equal(st_metrics_register(fx->m, &d, &f), ST_OK);
    assert_int_equal(st_metrics_counter(f, ST_LABELS("default"), &c), ST_OK);
    st_counter_add(c, 3);
    st_metrics_http_opts_t o = {.port = 0, .stats = {.node = "node-a", .fn = hook, .arg = "hello"}};
    assert_int_equal(st_metrics_http_start(fx->m, &o, &fx->h), ST_OK);
    fx->port = st_metrics_http_port(fx->h);
    assert_true(fx->port != 0);
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *fx = *state;
    st_metrics_http_stop(fx->h);
    st_metrics_destroy(fx->m);
    free(fx);
    return 0;
}

static void test_metrics_route(void **state)
{
    fixture_t *fx = *state;
    char *r = http(fx->port, "GET", "/metrics");
    assert_non_null(strstr(r, "HTTP/1.0 200") ? r : strstr(r, "HTTP/1.1 200"));
    assert_non_null(strstr(r, "Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"));
    assert_non_null(strstr(r, "\r\n\r\n# HELP strata_build_info "));
    assert_non_null(strstr(r, "strata_lookups_total{namespace=\"default\"} 3\n"));
    free(r);
}

static void test_stats_route(void **state)
{
    fixture_t *fx = *state;
    char *r = http(fx->port, "GET", "/stats");
    assert_non_null(strstr(r, " 200 "));
    assert_non_null(strstr(r, "Content-Type: application/json\r\n"));
    assert_null(strstr(r, "Access-Control-Allow-Origin")); /* same origin only */
    assert_non_null(strstr(r, "\"node\":\"node-a\""));
    assert_non_null(strstr(r, "\"counters\":{\"lookups_total\":3}"));
    assert_non_null(strstr(r, "\"module\":\"hello\"}"));
    free(r);
    /* A page of another origin gets no permission to read either. */
    r = http_h(fx->port, "GET", "/stats", "Origin: http://evil.example\r\n");
    assert_non_null(strstr(r, " 200 "));
    assert_null(strstr(r, "Access-Control-Allow-Origin"));
    free(r);
}

static void test_dashboard_and_health(void **state)
{
    fixture_t *fx = *state;
    char *r = http(fx->port, "GET", "/dashboard");
    assert_non_null(strstr(r, " 200 "));
    assert_non_null(strstr(r, "Content-Type: text/html; charset=utf-8\r\n"));
    char *body = strstr(r, "\r\n\r\n");
    assert_non_null(body);
    assert_int_equal(strlen(body + 4), st_metrics_dashboard_html_len);
    assert_memory_equal(body + 4, st_metrics_dashboard_html, st_metrics_dashboard_html_len);
    free(r);
    r = http(fx->port, "GET", "/healthz");
    assert_non_null(strstr(r, " 200 "));
    assert_non_null(strstr(r, "\r\n\r\nok\n"));
    free(r);
    r = http(fx->port, "HEAD", "/metrics");
    assert_non_null(strstr(r, " 200 "));
    assert_null(strstr(r, "# HELP"));
    free(r);
}

static void test_errors(void **state)
{
    fixture_t *fx = *state;
    char *r = http(fx->port, "GET", "/nope");
    assert_non_null(strstr(r, " 404 "));
    free(r);
    r = http(fx->port, "GET", "/metrics/extra");
    assert_non_null(strstr(r, " 404 "));
    free(r);
    r = http(fx->port, "POST", "/metrics");
    assert_non_null(strstr(r, " 405 "));
    assert_non_null(strstr(r, "Allow: GET, HEAD, OPTIONS\r\n"));
    free(r);
    r = http(fx->port, "DELETE", "/stats");
    assert_non_null(strstr(r, " 405 "));
    free(r);
}

static void test_bind_errors(void **state)
{
    fixture_t *fx = *state;
    st_metrics_http_t *h = NULL;
    int old = st_log_set_fd(-1); /* the errors below are expected */
    st_metrics_http_opts_t bad = {.bind_addr = "localhost"};
    assert_int_equal(st_metrics_http_start(fx->m, &bad, &h), ST_ERR_INVALID);
    st_metrics_http_opts_t busy = {.port = fx->port};
    assert_int_equal(st_metrics_http_start(fx->m, &busy, &h), ST_ERR_IO);
    st_log_set_fd(old);
    assert_null(h);
    /* IPv6 loopback and a thread pool work too, when the host has ::1. */
    st_metrics_http_opts_t v6 = {.bind_addr = "::1", .threads = 2};
    st_log_set_fd(-1);
    st_status_t st = st_metrics_http_start(fx->m, &v6, &h);
    st_log_set_fd(old);
    if (st == ST_OK) {
        assert_true(st_metrics_http_port(h) != 0);
        st_metrics_http_stop(h);
    }
}

/* /metrics and /stats need the token; /healthz and /dashboard stay open. */
static void test_token(void **state)
{
    fixture_t *fx = *state;
    st_metrics_http_t *h = NULL;
    st_metrics_http_opts_t o = {.token = "s3cret-metrics-token"};
    char *r;

    assert_int_equal(st_metrics_http_start(fx->m, &o, &h), ST_OK);
    uint16_t port = st_metrics_http_port(h);
    const char *paths[] = {"/metrics", "/stats"};
    for (int i = 0; i < 2; i++) {
        r = http(port, "GET", paths[i]);
        assert_non_null(strstr(r, " 401 "));
        assert_non_null(strstr(r, "WWW-Authenticate: Bearer realm=\"strata metrics\"\r\n"));
        assert_null(strstr(r, "strata_lookups_total"));
        free(r);
        r = http_h(port, "GET", paths[i], "Authorization: Bearer s3cret-metrics-toke\r\n");
        assert_non_null(strstr(r, " 401 "));
        free(r);
        r = http_h(port, "GET", paths[i], "Authorization: Bearer s3cret-metrics-token2\r\n");
        assert_non_null(strstr(r, " 401 "));
        free(r);
        r = http_h(port, "GET", paths[i], "Authorization: Basic s3cret-metrics-token\r\n");
        assert_non_null(strstr(r, " 401 "));
        free(r);
        r = http_h(port, "GET", paths[i], "Authorization: Bearer s3cret-metrics-token\r\n");
        assert_non_null(strstr(r, " 200 "));
        assert_non_null(strstr(r, i == 0 ? "strata_lookups_total" : "\"lookups_total\":3"));
        free(r);
    }
    r = http(port, "GET", "/healthz");
    assert_non_null(strstr(r, " 200 "));
    free(r);
    r = http(port, "GET", "/dashboard");
    assert_non_null(strstr(r, " 200 "));
    free(r);
    st_metrics_http_stop(h);
}

/* Listed origins are echoed (with Vary: Origin), others get nothing; the
 * preflight of a page that sends the token. */
static void test_cors_origins(void **state)
{
    fixture_t *fx = *state;
    st_metrics_http_t *h = NULL;
    st_metrics_http_opts_t o = {.token = "tok",
                                .cors_origins = "https://dash.example:9101, http://b:1"};
    char *r;

    assert_int_equal(st_metrics_http_start(fx->m, &o, &h), ST_OK);
    uint16_t port = st_metrics_http_port(h);
    r = http_h(port, "GET", "/stats",
               "Origin: https://dash.example:9101\r\nAuthorization: Bearer tok\r\n");
    assert_non_null(strstr(r, " 200 "));
    assert_non_null(strstr(r, "Access-Control-Allow-Origin: https://dash.example:9101\r\n"));
    assert_non_null(strstr(r, "Vary: Origin\r\n"));
    free(r);
    r = http_h(port, "GET", "/stats", "Origin: http://b:1\r\n"); /* no token: 401, readable */
    assert_non_null(strstr(r, " 401 "));
    assert_non_null(strstr(r, "Access-Control-Allow-Origin: http://b:1\r\n"));
    free(r);
    const char *others[] = {"Origin: https://dash.example\r\n", "Origin: http://b:10\r\n",
                            "Origin: b:1\r\n", "Origin: *\r\n",
                            "Origin: https://dash.example:9101,http://b:1\r\n"};
    for (size_t i = 0; i < sizeof(others) / sizeof(others[0]); i++) {
        char hdr[256];
        snprintf(hdr, sizeof(hdr), "%sAuthorization: Bearer tok\r\n", others[i]);
        r = http_h(port, "GET", "/stats", hdr);
        assert_non_null(strstr(r, " 200 "));
        assert_null(strstr(r, "Access-Control-Allow-Origin"));
        free(r);
    }
    r = http_h(port, "OPTIONS", "/stats", "Origin: http://b:1\r\n");
    assert_non_null(strstr(r, " 204 "));
    assert_non_null(strstr(r, "Access-Control-Allow-Origin: http://b:1\r\n"));
    assert_non_null(strstr(r, "Access-Control-Allow-Headers: Authorization\r\n"));
    free(r);
    r = http_h(port, "OPTIONS", "/stats", "Origin: http://evil\r\n");
    assert_null(strstr(r, "Access-Control-Allow-Origin"));
    free(r);
    st_metrics_http_stop(h);

    int old = st_log_set_fd(-1);
    st_metrics_http_opts_t star = {.cors_origins = "*"};
    assert_int_equal(st_metrics_http_start(fx->m, &star, &h), ST_ERR_INVALID);
    st_log_set_fd(old);
}

/* A non-loopback address needs TLS or a token; half a TLS pair is refused. */
static void test_public_bind(void **state)
{
    fixture_t *fx = *state;
    st_metrics_http_t *h = NULL;
    int old = st_log_set_fd(-1);
    st_metrics_http_opts_t open4 = {.bind_addr = "0.0.0.0"};
    assert_int_equal(st_metrics_http_start(fx->m, &open4, &h), ST_ERR_INVALID);
    st_metrics_http_opts_t open6 = {.bind_addr = "::"};
    assert_int_equal(st_metrics_http_start(fx->m, &open6, &h), ST_ERR_INVALID);
    st_metrics_http_opts_t half = {.tls_cert_pem = "-----BEGIN CERTIFICATE-----\n"};
    assert_int_equal(st_metrics_http_start(fx->m, &half, &h), ST_ERR_INVALID);
    st_log_set_fd(old);
    assert_null(h);
    st_metrics_http_opts_t lo = {.bind_addr = "127.0.0.2"}; /* all of 127/8 is loopback */
    assert_int_equal(st_metrics_http_start(fx->m, &lo, &h), ST_OK);
    st_metrics_http_stop(h);
    st_metrics_http_opts_t tok = {.bind_addr = "0.0.0.0", .token = "t"};
    assert_int_equal(st_metrics_http_start(fx->m, &tok, &h), ST_OK);
    char *r = http(st_metrics_http_port(h), "GET", "/metrics");
    assert_non_null(strstr(r, " 401 "));
    free(r);
    st_metrics_http_stop(h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_metrics_route),        cmocka_unit_test(test_stats_route),
        cmocka_unit_test(test_dashboard_and_health), cmocka_unit_test(test_errors),
        cmocka_unit_test(test_bind_errors),          cmocka_unit_test(test_token),
        cmocka_unit_test(test_cors_origins),         cmocka_unit_test(test_public_bind),
    };
    st_log_set_level(ST_LOG_WARN);
    return cmocka_run_group_tests(tests, setup, teardown);
}
