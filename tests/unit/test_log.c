/* test_log.c - line format, levels and per-site rate limiting. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "log.h"
#include "support/unit_main.h"

static char *capture(void (*fn)(void))
{
    char path[] = "/tmp/st_test_log_XXXXXX";
    int fd = mkstemp(path);
    int old;
    FILE *f;
    char *buf = calloc(1, 65536);

    assert_true(fd >= 0);
    unlink(path);
    old = lg_set_fd(fd);
    fn();
    lg_set_fd(old);
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
    lg_set_ident("testd");
    lg_set_level(LG_INFO);
    lg_error("disk full path=%s free=%d", "/data", 0);
    lg_info("started port=%d", 7000);
    lg_debug("not shown");
    lg_warn("two\nlines");
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
    lg_set_level(LG_INFO);
    for (int i = 0; i < 100; i++) {
        lg_warn_ratelimited("peer down node=%d", i);
    }
}

static void test_ratelimit(void **state)
{
    char *out = capture(emit_burst);

    assert_int_equal(count_lines(out), LG_BURST);
    assert_non_null(strstr(out, "peer down node=0"));
    assert_null(strstr(out, "node=99"));
    free(out);
}

static void test_ratelimit_reports_suppressed(void **state)
{
    lg_ratelimit_t rl = LG_RATELIMIT_INIT;
    uint64_t sup;

    for (int i = 0; i < LG_BURST; i++) {
        assert_true(lg_ratelimit_check(&rl, &sup));
        assert_int_equal(sup, 0);
    }
    for (int i = 0; i < 7; i++) {
        assert_false(lg_ratelimit_check(&rl, &sup));
    }
    /* Pretend the window has passed. */
    rl.window_start_ms -= LG_INTERVAL_MS + 1;
    assert_true(lg_ratelimit_check(&rl, &sup));
    assert_int_equal(sup, 7);
}

static void test_parse_level(void **state)
{
    lg_level_t l = LG_INFO;

    assert_int_equal(lg_parse_level("DEBUG", &l), ST_OK);
    assert_int_equal(l, LG_DEBUG);
    assert_int_equal(lg_parse_level("warning", &l), ST_OK);
    assert_int_equal(l, LG_WARN);
    assert_int_equal(lg_parse_level("loud", &l), ST_ERR_INVALID);
    assert_int_equal(l, LG_WARN);
}

int main(void)
{
    UNIT_RUN(cmocka_unit_test(test_format_and_levels), cmocka_unit_test(test_ratelimit),
             cmocka_unit_test(test_ratelimit_reports_suppressed),
             cmocka_unit_test(test_parse_level));
}
