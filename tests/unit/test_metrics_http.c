/*
 * test_metrics_http.c - the observability HTTP server on loopback: routes,
 * status codes, headers, port 0, and bind errors.
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

/* Sends one HTTP/1.0 request to 127.0.0.1:port and returns the whole reply. */
static char *http(uint16_t port, const char *method, const char *path)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(port)};
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
    char req[512];
    int n = snprintf(req, sizeof(req), "%s %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n", method, path);
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
    assert_non_null(strstr(r, "Access-Control-Allow-Origin: *\r\n"));
    assert_non_null(strstr(r, "\"node\":\"node-a\""));
    assert_non_null(strstr(r, "\"counters\":{\"lookups_total\":3}"));
    assert_non_null(strstr(r, "\"module\":\"hello\"}"));
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
    assert_non_null(strstr(r, "Allow: GET, HEAD\r\n"));
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_metrics_route),        cmocka_unit_test(test_stats_route),
        cmocka_unit_test(test_dashboard_and_health), cmocka_unit_test(test_errors),
        cmocka_unit_test(test_bind_errors),
    };
    st_log_set_level(ST_LOG_WARN);
    return cmocka_run_group_tests(tests, setup, teardown);
}
