/* test_log.c - line format, levels and per-site rate limiting. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "st_log.h"

static char *capture(void (*fn)(void))
{
    char path[] = "/tmp/st_test_log_XXXXXX";
    int fd = mkstemp(path);
    int old;
    FILE *f;
    char *buf = calloc(1, 65536);

    assert_true(fd >= 0);
    unlink(path);
    old = st_log_set_fd(fd);
    fn();
    st_log_set_fd(old);
    lseek(fd, 0, SEEK_SET);
    f = fdopen(fd, "r");
    assert_non_null(f);
    fread(buf, 1, 65535, f);
    fclose(f);
    return buf;
}

static size_t count_lines(const char *s)
{
    size_t n = 0;

    for (; *s; s++) {
        n += *s == '\n';
    }
    return n;
}

static void emit_levels(void)
{
    st_log_set_ident("testd");
    st_log_set_level(ST_LOG_INFO);
    st_error("disk full path=%s free=%d", "/data", 0);
    st_info("started port=%d", 7000);
    st_debug("not shown");
    st_warn("two\nlines");
}

static void test_format_and_levels(void **state)
{
    char *out = capture(emit_levels);

    assert_int_equal(count_lines(out), 3);
    assert_non_null(strstr(out, "ERROR testd["));
    assert_non_null(strstr(out, "] disk full path=/data free=0\n"));
    assert_non_null(strstr(out, "INFO  testd["));
    assert_null(strstr(out, "not shown"));
    assert_non_null(strstr(out, "two lines\n")); /* newlines folded */
    /* ISO-8601 UTC timestamp at the start of each line. */
    assert_true(out[4] == '-' && out[10] == 'T' && strchr(out, 'Z') != NULL);
    free(out);
}

static void emit_burst(void)
{
    st_log_set_level(ST_LOG_INFO);
    for (int i = 0; i < 100; i++) {
        st_warn_ratelimited("peer down node=%d", i);
    }
}

static void test_ratelimit(void **state)
{
    char *out = capture(emit_burst);

    assert_int_equal(count_lines(out), ST_LOG_BURST);
    assert_non_null(strstr(out, "peer down node=0"));
    assert_null(strstr(out, "node=99"));
    free(out);
}

static void test_ratelimit_reports_suppressed(void **state)
{
    st_log_ratelimit_t rl = ST_LOG_RATELIMIT_INIT;
    uint64_t sup;

    for (int i = 0; i < ST_LOG_BURST; i++) {
        assert_true(st_log_ratelimit_check(&rl, &sup));
        assert_int_equal(sup, 0);
    }
    for (int i = 0; i < 7; i++) {
        assert_false(st_log_ratelimit_check(&rl, &sup));
    }
    /* Pretend the window has passed. */
    rl.window_start_ms -= ST_LOG_INTERVAL_MS + 1;
    assert_true(st_log_ratelimit_check(&rl, &sup));
    assert_int_equal(sup, 7);
}

static void test_parse_level(void **state)
{
    st_log_level_t l = ST_LOG_INFO;

    assert_int_equal(st_log_parse_level("DEBUG", &l), ST_OK);
    assert_int_equal(l, ST_LOG_DEBUG);
    assert_int_equal(st_log_parse_level("warning", &l), ST_OK);
    assert_int_equal(l, ST_LOG_WARN);
    assert_int_equal(st_log_parse_level("loud", &l), ST_ERR_INVALID);
    assert_int_equal(l, ST_LOG_WARN);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_format_and_levels),
        cmocka_unit_test(test_ratelimit),
        cmocka_unit_test(test_ratelimit_reports_suppressed),
        cmocka_unit_test(test_parse_level),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
