/*
 * etcd_fixture.c - a throwaway etcd-server per test, through scripts/etcd.sh.
 */
#include "etcd_fixture.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cluster.h"

/* Runs cmd with popen and returns its stdout (malloc'd) and exit status. */
static char *et_run(const char *cmd, int *rc_p)
{
    FILE *p = popen(cmd, "r");
    size_t len = 0, cap = 4096;
    char *out;
    int rc;

    if (p == NULL) {
        return NULL;
    }
    out = malloc(cap);
    if (out == NULL) {
        pclose(p);
        return NULL;
    }
    for (;;) {
        size_t got;

        if (len + 1 == cap) {
            char *bigger = cap < (1u << 24) ? realloc(out, cap * 2) : NULL;

            if (bigger == NULL) {
                break;
            }
            out = bigger;
            cap *= 2;
        }
        got = fread(out + len, 1, cap - 1 - len, p);
        if (got == 0) {
            break;
        }
        len += got;
    }
    out[len] = '\0';
    rc = pclose(p);
    *rc_p = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
    return out;
}

static int et_launch(et_etcd_t *e)
{
    char cmd[1024];
    char *out;
    int rc = -1;

    /* ETCD_WATCH_PID: etcd goes when this test does, however it ends. */
    snprintf(cmd, sizeof(cmd), "ETCD_WATCH_PID=%d bash '%s' start %d '%s'", (int)getpid(),
             e->script, e->port, e->dir);
    out = et_run(cmd, &rc);
    if (out == NULL || rc != 0) {
        fprintf(stderr, "etcd fixture: %s failed (exit %d)\n", cmd, rc);
        free(out);
        return rc == 2 ? 77 : -1;
    }
    e->pid = (pid_t)atoi(out);
    free(out);
    return e->pid > 0 ? 0 : -1;
}

int et_start(et_etcd_t *e, const char *script)
{
    const char *tmp = getenv("TMPDIR");
    const char *env = getenv("STRATA_ETCD_SH");

    memset(e, 0, sizeof(*e));
    snprintf(e->script, sizeof(e->script), "%s",
             script != NULL ? script : (env != NULL ? env : "scripts/etcd.sh"));
    if (access("/usr/bin/etcd", X_OK) != 0 && getenv("ETCD") == NULL) {
        fprintf(stderr, "etcd fixture: no /usr/bin/etcd (install etcd-server)\n");
        return 77;
    }
    snprintf(e->dir, sizeof(e->dir), "%s/strata-etcd-XXXXXX", tmp != NULL ? tmp : "/tmp");
    if (mkdtemp(e->dir) == NULL) {
        fprintf(stderr, "etcd fixture: mkdtemp %s: %s\n", e->dir, strerror(errno));
        return -1;
    }
    for (int attempt = 0; attempt < 5; attempt++) {
        int rc;

        /* The peer port is port + 1: take a port whose successor is free too. */
        e->port = tc_free_port();
        snprintf(e->endpoint, sizeof(e->endpoint), "http://127.0.0.1:%d", e->port);
        rc = et_launch(e);
        if (rc != -1) {
            return rc;
        }
    }
    return -1;
}

void et_stop(et_etcd_t *e)
{
    char cmd[600];
    int rc;

    if (e->pid <= 0) {
        return;
    }
    snprintf(cmd, sizeof(cmd), "bash '%s' stop %d", e->script, (int)e->pid);
    free(et_run(cmd, &rc));
    e->pid = 0;
}

void et_kill(et_etcd_t *e)
{
    if (e->pid <= 0) {
        return;
    }
    kill(e->pid, SIGKILL);
    for (int i = 0; i < 100 && kill(e->pid, 0) == 0; i++) {
        usleep(20000);
    }
    e->pid = 0;
}

int et_restart(et_etcd_t *e)
{
    if (e->pid > 0) {
        return 0;
    }
    return et_launch(e) == 0 ? 0 : -1;
}

void et_destroy(et_etcd_t *e)
{
    char cmd[300];
    int rc;

    et_stop(e);
    if (e->dir[0] != '\0') {
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", e->dir);
        free(et_run(cmd, &rc));
        e->dir[0] = '\0';
    }
}

char *et_ctl(const et_etcd_t *e, const char *args)
{
    char cmd[2048];
    char *out;
    int rc;

    snprintf(cmd, sizeof(cmd), "ETCDCTL_API=3 etcdctl --endpoints %s %s 2>/dev/null", e->endpoint,
             args);
    out = et_run(cmd, &rc);
    if (out != NULL && rc != 0) {
        free(out);
        return NULL;
    }
    return out;
}
