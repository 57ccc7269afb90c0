/*
 * test_notify.c - cached/notify.c: NOTIFY_SOCKET as a path and as @name,
 * values it refuses (relative, too long), WATCHDOG_USEC and WATCHDOG_PID,
 * the watchdog's interval, a socket nobody listens on (logged once), and
 * random environment values (seed printed; STRATA_TEST_SEED replays it).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "log.h"
#include "notify.h"

static char dir[64];
static char sock_path[128];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/strata-notify-XXXXXX");
    assert_non_null(mkdtemp(dir));
    snprintf(sock_path, sizeof(sock_path), "%s/notify.sock", dir);
    unsetenv("NOTIFY_SOCKET");
    unsetenv("WATCHDOG_USEC");
    unsetenv("WATCHDOG_PID");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    unlink(sock_path);
    rmdir(dir);
    unsetenv("NOTIFY_SOCKET");
    unsetenv("WATCHDOG_USEC");
    unsetenv("WATCHDOG_PID");
    return 0;
}

/* A datagram socket bound at name (a path, or "@name" abstract). */
static int listener(const char *name)
{
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    size_t len = strlen(name);
    int fd = socket(AF_UNIX, SOCK_DGRAM, 0);
    struct timeval tv = {.tv_sec = 5};

    assert_true(fd >= 0);
    memcpy(sun.sun_path, name, len);
    if (name[0] == '@') {
        sun.sun_path[0] = '\0';
    }
    assert_int_equal(
        bind(fd, (struct sockaddr *)&sun,
             (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len + (name[0] == '@' ? 0 : 1))),
        0);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
}

static void expect_datagram(int fd, const char *want)
{
    char buf[512];
    ssize_t n = recv(fd, buf, sizeof(buf) - 1, 0);

    assert_true(n >= 0);
    buf[n] = '\0';
    assert_string_equal(buf, want);
}

static int pending(int fd)
{
    char buf[64];

    return recv(fd, buf, sizeof(buf), MSG_DONTWAIT) >= 0;
}

static void test_off_without_socket(void **state)
{
    cd_notify_t n;

    (void)state;
    cd_notify_open(&n);
    assert_int_equal(n.fd, -1);
    cd_notify_send(&n, "READY=1"); /* nothing, no crash */
    cd_notify_watchdog(&n, 1000);
    cd_notify_close(&n);
}

static void test_path_socket(void **state)
{
    cd_notify_t n;
    int fd = listener(sock_path);

    (void)state;
    setenv("NOTIFY_SOCKET", sock_path, 1);
    cd_notify_open(&n);
    assert_true(n.fd >= 0);
    assert_int_equal(n.watchdog_ms, 0);
    cd_notify_send(&n, "READY=1\nSTATUS=serving");
    expect_datagram(fd, "READY=1\nSTATUS=serving");
    cd_notify_watchdog(&n, 1000); /* no WATCHDOG_USEC: none */
    assert_false(pending(fd));
    cd_notify_close(&n);
    assert_int_equal(n.fd, -1);
    close(fd);
}

static void test_abstract_socket(void **state)
{
    char name[64];
    cd_notify_t n;
    int fd;

    (void)state;
    snprintf(name, sizeof(name), "@strata-test-notify-%d", (int)getpid());
    fd = listener(name);
    setenv("NOTIFY_SOCKET", name, 1);
    cd_notify_open(&n);
    assert_true(n.fd >= 0);
    cd_notify_send(&n, "STOPPING=1");
    expect_datagram(fd, "STOPPING=1");
    cd_notify_close(&n);
    close(fd);
}

static void test_refused_values(void **state)
{
    char long_path[200];
    cd_notify_t n;

    (void)state;
    setenv("NOTIFY_SOCKET", "relative/notify.sock", 1);
    cd_notify_open(&n);
    assert_int_equal(n.fd, -1);
    memset(long_path, 'a', sizeof(long_path) - 1);
    long_path[0] = '/';
    long_path[sizeof(long_path) - 1] = '\0';
    setenv("NOTIFY_SOCKET", long_path, 1);
    cd_notify_open(&n);
    assert_int_equal(n.fd, -1);
}

static void test_watchdog(void **state)
{
    static const struct {
        const char *usec, *pid;
        uint64_t want_ms;
    } cases[] = {
        {"300000", NULL, 150}, {"300000", "self", 150}, {"300000", "1", 0}, {"abc", NULL, 0},
        {"1000", NULL, 0},     {"", NULL, 0},           {"-5", NULL, 0},    {"12x", NULL, 0},
    };
    char self[32];
    int fd = listener(sock_path);

    (void)state;
    snprintf(self, sizeof(self), "%d", (int)getpid());
    setenv("NOTIFY_SOCKET", sock_path, 1);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        cd_notify_t n;

        setenv("WATCHDOG_USEC", cases[i].usec, 1);
        if (cases[i].pid == NULL) {
            unsetenv("WATCHDOG_PID");
        } else {
            setenv("WATCHDOG_PID", strcmp(cases[i].pid, "self") == 0 ? self : cases[i].pid, 1);
        }
        cd_notify_open(&n);
        if (n.watchdog_ms != cases[i].want_ms) {
            fail_msg("WATCHDOG_USEC=%s WATCHDOG_PID=%s: watchdog_ms=%llu, want %llu", cases[i].usec,
                     cases[i].pid ? cases[i].pid : "(unset)", (unsigned long long)n.watchdog_ms,
                     (unsigned long long)cases[i].want_ms);
        }
        cd_notify_close(&n);
    }

    /* Every 150 ms of the clock given, and not between. */
    cd_notify_t n;
    setenv("WATCHDOG_USEC", "300000", 1);
    unsetenv("WATCHDOG_PID");
    cd_notify_open(&n);
    cd_notify_watchdog(&n, 1000);
    expect_datagram(fd, "WATCHDOG=1");
    cd_notify_watchdog(&n, 1100);
    assert_false(pending(fd));
    cd_notify_watchdog(&n, 1150);
    expect_datagram(fd, "WATCHDOG=1");
    cd_notify_close(&n);
    close(fd);
}

static void test_nobody_listening(void **state)
{
    cd_notify_t n;

    (void)state;
    setenv("NOTIFY_SOCKET", sock_path, 1); /* nothing bound there */
    cd_notify_open(&n);
    assert_true(n.fd >= 0);
    cd_notify_send(&n, "READY=1");
    assert_int_equal(atomic_load(&n.warned), 1);
    cd_notify_send(&n, "STATUS=again"); /* not logged again; no crash */
    cd_notify_close(&n);
}

/* Random bytes (no NUL) as the three variables: never a crash, and either off
 * or a socket with a sane interval. */
static void test_fuzz_environment(void **state)
{
    const char *seed_env = getenv("STRATA_TEST_SEED");
    unsigned seed = seed_env ? (unsigned)strtoul(seed_env, NULL, 10) : (unsigned)time(NULL);
    int iters = getenv("STRATA_FUZZ_ITERS") ? atoi(getenv("STRATA_FUZZ_ITERS")) : 3000;
    const char *names[] = {"NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"};

    (void)state;
    printf("test_notify fuzz seed=%u (STRATA_TEST_SEED replays it)\n", seed);
    srand(seed);
    lg_set_level(LG_ERROR); /* every refused value is a warning */
    for (int it = 0; it < iters; it++) {
        cd_notify_t n;

        for (int v = 0; v < 3; v++) {
            char val[160];
            size_t len = (size_t)rand() % sizeof(val);

            for (size_t i = 0; i < len; i++) {
                val[i] = (char)(1 + rand() % 255);
            }
            val[len] = '\0';
            if (rand() % 4 == 0) {
                val[0] = "/@0"[rand() % 3];
            }
            if (rand() % 5 == 0) {
                unsetenv(names[v]);
            } else {
                setenv(names[v], val, 1);
            }
        }
        cd_notify_open(&n);
        assert_true(n.fd == -1 || n.fd >= 0);
        assert_true(n.watchdog_ms <= UINT64_MAX / 2000u);
        cd_notify_send(&n, "STATUS=fuzz");
        cd_notify_watchdog(&n, (uint64_t)it * 1000u);
        cd_notify_close(&n);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_off_without_socket, setup, teardown),
        cmocka_unit_test_setup_teardown(test_path_socket, setup, teardown),
        cmocka_unit_test_setup_teardown(test_abstract_socket, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refused_values, setup, teardown),
        cmocka_unit_test_setup_teardown(test_watchdog, setup, teardown),
        cmocka_unit_test_setup_teardown(test_nobody_listening, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fuzz_environment, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
