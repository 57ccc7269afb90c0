/*
 * test_procstat.c - cm_proc_sample(): the descriptors, threads and resident
 * bytes it reports move by exactly what the test opens, starts and touches,
 * and agree with /proc read another way.
 */
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "procstat.h"
#include "support/unit_main.h"

#define TP_FDS 7

static void test_procstat_fds(void **state)
{
    cm_proc_t before, during, after;
    int fds[TP_FDS];

    (void)state;
    assert_int_equal(cm_proc_sample(&before), ST_OK);
    assert_true(before.ps_open_fds >= 3); /* stdin, stdout, stderr */
    for (int i = 0; i < TP_FDS; i++) {
        fds[i] = open("/dev/null", O_RDONLY | O_CLOEXEC);
        assert_true(fds[i] >= 0);
    }
    assert_int_equal(cm_proc_sample(&during), ST_OK);
    assert_int_equal(during.ps_open_fds, before.ps_open_fds + TP_FDS);
    for (int i = 0; i < TP_FDS; i++) {
        close(fds[i]);
    }
    assert_int_equal(cm_proc_sample(&after), ST_OK);
    assert_int_equal(after.ps_open_fds, before.ps_open_fds);
}

typedef struct tp_gate {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int go;
} tp_gate_t;

static void *tp_wait(void *arg)
{
    tp_gate_t *g = arg;

    pthread_mutex_lock(&g->lock);
    while (!g->go) {
        pthread_cond_wait(&g->cond, &g->lock);
    }
    pthread_mutex_unlock(&g->lock);
    return NULL;
}

/* Threads counted by listing /proc/self/task, as a soak's sampler does. */
static uint64_t tp_task_entries(void)
{
    DIR *dir = opendir("/proc/self/task");
    struct dirent *de;
    uint64_t n = 0;

    assert_non_null(dir);
    while ((de = readdir(dir)) != NULL) {
        n += de->d_name[0] != '.';
    }
    closedir(dir);
    return n;
}

static void test_procstat_threads(void **state)
{
    tp_gate_t g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
    pthread_t t[3];
    cm_proc_t before, during, after;

    (void)state;
    assert_int_equal(cm_proc_sample(&before), ST_OK);
    assert_int_equal(before.ps_threads, tp_task_entries());
    for (int i = 0; i < 3; i++) {
        assert_int_equal(pthread_create(&t[i], NULL, tp_wait, &g), 0);
    }
    assert_int_equal(cm_proc_sample(&during), ST_OK);
    assert_int_equal(during.ps_threads, before.ps_threads + 3);
    assert_int_equal(during.ps_threads, tp_task_entries());
    pthread_mutex_lock(&g.lock);
    g.go = 1;
    pthread_cond_broadcast(&g.cond);
    pthread_mutex_unlock(&g.lock);
    for (int i = 0; i < 3; i++) {
        pthread_join(t[i], NULL);
    }
    assert_int_equal(cm_proc_sample(&after), ST_OK);
    assert_int_equal(after.ps_threads, before.ps_threads);
}

static void test_procstat_rss(void **state)
{
    const size_t len = 64u << 20;
    cm_proc_t before, during;
    volatile unsigned char *p;

    (void)state;
    assert_int_equal(cm_proc_sample(&before), ST_OK);
    assert_true(before.ps_rss_bytes > 0);
    p = malloc(len);
    assert_non_null((void *)p);
    for (size_t i = 0; i < len; i += 4096) {
        p[i] = (unsigned char)i; /* each page resident */
    }
    assert_int_equal(cm_proc_sample(&during), ST_OK);
    /* At least the 64 MiB touched (less a little that may have been freed
     * meanwhile), and not wildly more. */
    assert_true(during.ps_rss_bytes >= before.ps_rss_bytes + len - (1u << 20));
    assert_true(during.ps_rss_bytes <= before.ps_rss_bytes + 2 * len);
    free((void *)p);
}

int main(void)
{
    UNIT_RUN(cmocka_unit_test(test_procstat_fds), cmocka_unit_test(test_procstat_threads),
             cmocka_unit_test(test_procstat_rss));
}
