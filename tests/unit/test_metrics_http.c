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

#include "log.h"
#include "metrics_http.h"

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

/* The strings a reply must hold (a status such as " 404 ", header lines,
 * pieces of the body), up to a NULL. */
#define WANT(...) ((const char *const[]){__VA_ARGS__, NULL})

static void assert_holds(const char *r, const char *const *want)
{
    for (; *want != NULL; want++) {
        assert_non_null(strstr(r, *want));
    }
}

/* Sends one request; its reply must hold every string of want and, where
 * lacks is not NULL, not lacks. */
static void expect_reply(uint16_t port, const char *method, const char *path, const char *headers,
                         const char *const *want, const char *lacks)
{
    char *r = http_h(port, method, path, headers);

    assert_holds(r, want);
    if (lacks != NULL) {
        assert_null(strstr(r, lacks));
    }
    free(r);
}

typedef struct {
    mx_metrics_t *m;
    mx_http_t *h;
    uint16_t port;
} fixture_t;

static void hook(mx_json_t *j, void *arg)
{
    mx_json_key(j, "module");
    mx_json_string(j, arg);
}

static int setup(void **state)
{
    fixture_t *fx = calloc(1, sizeof(*fx));
    mx_metric_family_t *f;
    mx_counter_t *c;
    assert_int_equal(mx_create(&fx->m), ST_OK);
    mx_metric_desc_t d = {.name = "strata_lookups_total",
                          .help = "Lookups.",
                          .type = MX_METRIC_COUNTER,
                          .label_names = MX_LABELS("namespace"),
                          .n_labels = 1};
    assert_int_equal(mx_register(fx->m, &d, &f), ST_OK);
    assert_int_equal(mx_counter(f, MX_LABELS("default"), &c), ST_OK);
    mx_counter_add(c, 3);
    mx_http_opts_t o = {.port = 0, .stats = {.node = "node-a", .fn = hook, .arg = "hello"}};
    assert_int_equal(mx_http_start(fx->m, &o, &fx->h), ST_OK);
    fx->port = mx_http_port(fx->h);
    assert_true(fx->port != 0);
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *fx = *state;
    mx_http_stop(fx->h);
    mx_destroy(fx->m);
    free(fx);
    return 0;
}

static void test_metrics_route(void **state)
{
    fixture_t *fx = *state;
    char *r = http(fx->port, "GET", "/metrics");
    assert_non_null(strstr(r, "HTTP/1.0 200") ? r : strstr(r, "HTTP/1.1 200"));
    assert_holds(r, WANT("Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n",
                         "\r\n\r\n# HELP strata_build_info ",
                         "strata_lookups_total{namespace=\"default\"} 3\n"));
    free(r);
}

static void test_stats_route(void **state)
{
    fixture_t *fx = *state;

    expect_reply(fx->port, "GET", "/stats", "",
                 WANT(" 200 ", "Content-Type: application/json\r\n", "\"node\":\"node-a\"",
                      "\"counters\":{\"lookups_total\":3}", "\"module\":\"hello\"}"),
                 "Access-Control-Allow-Origin"); /* same origin only */
    /* A page of another origin gets no permission to read either. */
    expect_reply(fx->port, "GET", "/stats", "Origin: http://evil.example\r\n", WANT(" 200 "),
                 "Access-Control-Allow-Origin");
}

static void test_dashboard_and_health(void **state)
{
    fixture_t *fx = *state;
    char *r = http(fx->port, "GET", "/dashboard");
    assert_holds(r, WANT(" 200 ", "Content-Type: text/html; charset=utf-8\r\n"));
    char *body = strstr(r, "\r\n\r\n");
    assert_non_null(body);
    assert_int_equal(strlen(body + 4), mx_dashboard_html_len);
    assert_memory_equal(body + 4, mx_dashboard_html, mx_dashboard_html_len);
    free(r);
    expect_reply(fx->port, "GET", "/healthz", "", WANT(" 200 ", "\r\n\r\nok\n"), NULL);
    expect_reply(fx->port, "HEAD", "/metrics", "", WANT(" 200 "), "# HELP");
}

static void test_errors(void **state)
{
    fixture_t *fx = *state;

    expect_reply(fx->port, "GET", "/nope", "", WANT(" 404 "), NULL);
    expect_reply(fx->port, "GET", "/metrics/extra", "", WANT(" 404 "), NULL);
    expect_reply(fx->port, "POST", "/metrics", "", WANT(" 405 ", "Allow: GET, HEAD, OPTIONS\r\n"),
                 NULL);
    expect_reply(fx->port, "DELETE", "/stats", "", WANT(" 405 "), NULL);
}

static void test_bind_errors(void **state)
{
    fixture_t *fx = *state;
    mx_http_t *h = NULL;
    int old = lg_set_fd(-1); /* the errors below are expected */
    mx_http_opts_t bad = {.bind_addr = "localhost"};
    assert_int_equal(mx_http_start(fx->m, &bad, &h), ST_ERR_INVALID);
    mx_http_opts_t busy = {.port = fx->port};
    assert_int_equal(mx_http_start(fx->m, &busy, &h), ST_ERR_IO);
    lg_set_fd(old);
    assert_null(h);
    /* IPv6 loopback and a thread pool work too, when the host has ::1. */
    mx_http_opts_t v6 = {.bind_addr = "::1", .threads = 2};
    lg_set_fd(-1);
    st_status_t st = mx_http_start(fx->m, &v6, &h);
    lg_set_fd(old);
    if (st == ST_OK) {
        assert_true(mx_http_port(h) != 0);
        mx_http_stop(h);
    }
}

/* /metrics and /stats need the token; /healthz and /dashboard stay open. */
static void test_token(void **state)
{
    fixture_t *fx = *state;
    mx_http_t *h = NULL;
    mx_http_opts_t o = {.token = "s3cret-metrics-token"};

    assert_int_equal(mx_http_start(fx->m, &o, &h), ST_OK);
    uint16_t port = mx_http_port(h);
    const char *paths[] = {"/metrics", "/stats"};
    for (int i = 0; i < 2; i++) {
        expect_reply(port, "GET", paths[i], "",
                     WANT(" 401 ", "WWW-Authenticate: Bearer realm=\"strata metrics\"\r\n"),
                     "strata_lookups_total");
        expect_reply(port, "GET", paths[i], "Authorization: Bearer s3cret-metrics-toke\r\n",
                     WANT(" 401 "), NULL);
        expect_reply(port, "GET", paths[i], "Authorization: Bearer s3cret-metrics-token2\r\n",
                     WANT(" 401 "), NULL);
        expect_reply(port, "GET", paths[i], "Authorization: Basic s3cret-metrics-token\r\n",
                     WANT(" 401 "), NULL);
        expect_reply(port, "GET", paths[i], "Authorization: Bearer s3cret-metrics-token\r\n",
                     WANT(" 200 ", i == 0 ? "strata_lookups_total" : "\"lookups_total\":3"), NULL);
    }
    expect_reply(port, "GET", "/healthz", "", WANT(" 200 "), NULL);
    expect_reply(port, "GET", "/dashboard", "", WANT(" 200 "), NULL);
    mx_http_stop(h);
}

/* Listed origins are echoed (with Vary: Origin), others get nothing; the
 * preflight of a page that sends the token. */
static void test_cors_origins(void **state)
{
    fixture_t *fx = *state;
    mx_http_t *h = NULL;
    mx_http_opts_t o = {.token = "tok", .cors_origins = "https://dash.example:9101, http://b:1"};
    char *r;

    assert_int_equal(mx_http_start(fx->m, &o, &h), ST_OK);
    uint16_t port = mx_http_port(h);
    expect_reply(port, "GET", "/stats",
                 "Origin: https://dash.example:9101\r\nAuthorization: Bearer tok\r\n",
                 WANT(" 200 ", "Access-Control-Allow-Origin: https://dash.example:9101\r\n",
                      "Vary: Origin\r\n"),
                 NULL);
    /* No token: 401, readable. */
    expect_reply(port, "GET", "/stats", "Origin: http://b:1\r\n",
                 WANT(" 401 ", "Access-Control-Allow-Origin: http://b:1\r\n"), NULL);
    const char *others[] = {"Origin: https://dash.example\r\n", "Origin: http://b:10\r\n",
                            "Origin: b:1\r\n", "Origin: *\r\n",
                            "Origin: https://dash.example:9101,http://b:1\r\n"};
    for (size_t i = 0; i < sizeof(others) / sizeof(others[0]); i++) {
        char hdr[256];
        snprintf(hdr, sizeof(hdr), "%sAuthorization: Bearer tok\r\n", others[i]);
        expect_reply(port, "GET", "/stats", hdr, WANT(" 200 "), "Access-Control-Allow-Origin");
    }
    expect_reply(port, "OPTIONS", "/stats", "Origin: http://b:1\r\n",
                 WANT(" 204 ", "Access-Control-Allow-Origin: http://b:1\r\n",
                      "Access-Control-Allow-Headers: Authorization\r\n"),
                 NULL);
    r = http_h(port, "OPTIONS", "/stats", "Origin: http://evil\r\n");
    assert_null(strstr(r, "Access-Control-Allow-Origin"));
    free(r);
    mx_http_stop(h);

    int old = lg_set_fd(-1);
    mx_http_opts_t star = {.cors_origins = "*"};
    assert_int_equal(mx_http_start(fx->m, &star, &h), ST_ERR_INVALID);
    lg_set_fd(old);
}

/* A non-loopback address needs TLS or a token; half a TLS pair is refused. */
static void test_public_bind(void **state)
{
    fixture_t *fx = *state;
    mx_http_t *h = NULL;
    int old = lg_set_fd(-1);
    mx_http_opts_t open4 = {.bind_addr = "0.0.0.0"};
    assert_int_equal(mx_http_start(fx->m, &open4, &h), ST_ERR_INVALID);
    mx_http_opts_t open6 = {.bind_addr = "::"};
    assert_int_equal(mx_http_start(fx->m, &open6, &h), ST_ERR_INVALID);
    mx_http_opts_t half = {.tls_cert_pem = "-----BEGIN CERTIFICATE-----\n"};
    assert_int_equal(mx_http_start(fx->m, &half, &h), ST_ERR_INVALID);
    lg_set_fd(old);
    assert_null(h);
    mx_http_opts_t lo = {.bind_addr = "127.0.0.2"}; /* all of 127/8 is loopback */
    assert_int_equal(mx_http_start(fx->m, &lo, &h), ST_OK);
    mx_http_stop(h);
    mx_http_opts_t tok = {.bind_addr = "0.0.0.0", .token = "t"};
    assert_int_equal(mx_http_start(fx->m, &tok, &h), ST_OK);
    expect_reply(mx_http_port(h), "GET", "/metrics", "", WANT(" 401 "), NULL);
    mx_http_stop(h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_metrics_route),        cmocka_unit_test(test_stats_route),
        cmocka_unit_test(test_dashboard_and_health), cmocka_unit_test(test_errors),
        cmocka_unit_test(test_bind_errors),          cmocka_unit_test(test_token),
        cmocka_unit_test(test_cors_origins),         cmocka_unit_test(test_public_bind),
    };
    lg_set_level(LG_WARN);
    return cmocka_run_group_tests(tests, setup, teardown);
}
