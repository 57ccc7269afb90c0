/*
 * test_dataplane_isolation.c - stratad refuses to let several tenants share
 * a data plane that checks no remote key (UCX over sm, posix, cma, tcp:
 * any client of the worker reads and writes the whole process), unless
 * allow_shared_dataplane accepts the risk, which then shows in the log,
 * /metrics (strata_dataplane_isolated 0) and /stats. Real daemons on
 * loopback: a refused start over UCX with two tenants, the message checked;
 * one tenant over UCX and two over libfabric start (isolated 1); the opt-in
 * starts (isolated 0, warned); a SIGHUP reload that brings a second tenant
 * without the opt-in is refused and the old table stays; with it, taken
 * and warned again (docs/security.md).
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include <grpc/status.h>
#include <openssl/evp.h>

#include "cluster.h"
#include "srpc.h"
#include "strata.pb-c.h"
#include "stratad_arg.h"

#define TOK_A  "iso-alpha-token-0123456789"
#define TOK_B  "iso-beta-token-9876543210"
#define SECRET "integration-test-cluster-secret"

static const char *stratad_path;
static char tenants_path[128];

/* Writes the tenants file with the first n of alpha, beta. */
static void write_tenants(int n)
{
    static const char *const names[2] = {"alpha", "beta"}, *const toks[2] = {TOK_A, TOK_B};
    FILE *f = fopen(tenants_path, "w");

    assert_non_null(f);
    for (int t = 0; t < n; t++) {
        unsigned char h[32];
        unsigned int len = 0;

        assert_int_equal(EVP_Digest(toks[t], strlen(toks[t]), h, &len, EVP_sha256(), NULL), 1);
        fprintf(f, "%s sha256:", names[t]);
        for (int i = 0; i < 32; i++) {
            fprintf(f, "%02x", h[i]);
        }
        fprintf(f, " models=m\n");
    }
    fclose(f);
}

/* Runs stratad with argv (NULL-terminated, after the binary) until it exits
 * (at most 10 s); its output into log. Returns the exit status, -1 when it
 * was still running (killed), -2 for a signal. */
static int run_stratad(const char *const *args, char *log, size_t cap)
{
    char path[64];
    int fd, status = 0;
    pid_t pid;
    FILE *f;
    size_t n;

    snprintf(path, sizeof(path), "/tmp/strata-iso-run-%d.log", (int)getpid());
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        const char *argv[32];
        int argc = 0;

        dup2(fd, 1);
        dup2(fd, 2);
        argv[argc++] = stratad_path;
        for (; *args != NULL && argc < 31; args++) {
            argv[argc++] = *args;
        }
        argv[argc] = NULL;
        execv(stratad_path, (char *const *)argv);
        _exit(127);
    }
    close(fd);
    for (int i = 0; i < 200 && waitpid(pid, &status, WNOHANG) != pid; i++) {
        usleep(50000);
        if (i == 199) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            status = -1;
        }
    }
    f = fopen(path, "r");
    n = f ? fread(log, 1, cap - 1, f) : 0;
    log[n] = '\0';
    if (f) {
        fclose(f);
    }
    unlink(path);
    if (status == -1) {
        return -1;
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : -2;
}

/* The daemon's log (node 0), NUL-terminated; the caller frees it. */
static char *node_log(const tc_cluster_t *c)
{
    FILE *f = fopen(c->node[0].log, "r");
    char *buf = calloc(1, 1 << 20);
    size_t n;

    assert_non_null(f);
    assert_non_null(buf);
    n = fread(buf, 1, (1 << 20) - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

/* How often needle occurs in hay. */
static int count(const char *hay, const char *needle)
{
    int n = 0;

    for (const char *p = hay; (p = strstr(p, needle)) != NULL; p++) {
        n++;
    }
    return n;
}

/* The gRPC code of one Hello for tenant with token (0: it served). */
static int hello_once(const char *addr, const char *token, const char *tenant)
{
    Strata__V1__HelloRequest req = STRATA__V1__HELLO_REQUEST__INIT;
    Strata__V1__HelloResponse *resp = NULL;
    srpc_channel_config_t cfg = {0};
    srpc_channel_t *ch;
    srpc_error_t err;
    st_status_t st;

    cfg.token = token;
    assert_int_equal(srpc_channel_open(addr, &cfg, &ch), ST_OK);
    req.protocol_version = 1;
    req.tenant = (char *)tenant;
    req.model = (char *)"m";
    st = srpc_call(ch, &srpc_cache_methods[SRPC_CACHE_HELLO], &req.base, 30000,
                   (ProtobufCMessage **)&resp, &err);
    if (resp != NULL) {
        protobuf_c_message_free_unpacked(&resp->base, NULL);
    }
    srpc_channel_close(ch);
    return st == ST_OK ? 0 : err.grpc_code;
}

/* hello_once(), again while the channel is UNAVAILABLE (a loaded machine). */
static int hello_code(const char *addr, const char *token, const char *tenant)
{
    int code = GRPC_STATUS_UNAVAILABLE;

    for (int i = 0; i < 5 && code == GRPC_STATUS_UNAVAILABLE; i++) {
        if (i > 0) {
            usleep(200000);
        }
        code = hello_once(addr, token, tenant);
    }
    return code;
}

/* The message names the problem and every fix. */
static void assert_refusal_message(const char *log)
{
    assert_non_null(strstr(log, "tenants_file names 2 tenants but transport=ucx does not "
                                "enforce remote keys"));
    assert_non_null(strstr(log, "read and write every tenant's memory"));
    assert_non_null(strstr(log, "transport=libfabric"));
    assert_non_null(strstr(log, "one daemon per tenant"));
    assert_non_null(strstr(log, "InfiniBand verbs"));
    assert_non_null(strstr(log, "allow_shared_dataplane=true"));
}

/* Writes a tenants file of n tenants and starts one daemon with transport
 * (its flags), that file, opt (" --allow-shared-dataplane" or "") and
 * /metrics on mport; checks the isolation gauge says isolated. */
static void start_tenants(tc_cluster_t *cl, int n, const char *transport, const char *opt,
                          int mport, double isolated)
{
    char extra[512];

    write_tenants(n);
    snprintf(extra, sizeof(extra), "%s --tenants-file %s%s --metrics-listen 127.0.0.1:%d",
             transport, tenants_path, opt, mport);
    assert_int_equal(tc_start(cl, stratad_path, 1, extra), 0);
    assert_true(tc_metric(mport, "strata_dataplane_isolated") == isolated);
}

/* The dataplane object of /stats on mport holds want. */
static void assert_stats_dataplane(int mport, const char *want)
{
    char *stats = tc_http_get(mport, "/stats");

    assert_non_null(stats);
    assert_non_null(strstr(stats, want));
    free(stats);
}

static void test_two_tenants_over_ucx_refused(void **state)
{
    char log[16384], port[16], listen[32];
    const char *args[] = {"--listen",
                          listen,
                          "--cluster-secret",
                          SECRET,
                          "--tenants-file",
                          tenants_path,
                          "--transport",
                          "ucx",
                          NULL};

    (void)state;
    snprintf(port, sizeof(port), "%d", tc_free_port());
    snprintf(listen, sizeof(listen), "127.0.0.1:%s", port);
    write_tenants(2);
    assert_int_equal(run_stratad(args, log, sizeof(log)), 1);
    print_message("refused: %s\n", log);
    assert_non_null(strstr(log, "refusing to start"));
    assert_refusal_message(log);
    assert_null(strstr(log, "stratad ready"));
}

static void test_one_tenant_over_ucx_starts(void **state)
{
    int mport = tc_free_port();
    tc_cluster_t cl;

    (void)state;
    start_tenants(&cl, 1, "--transport ucx", "", mport, 1);
    assert_int_equal(hello_code(cl.node[0].addr, TOK_A, "alpha"), 0);
    tc_stop_all(&cl);
}

static void test_opt_in_starts_with_gauge_zero(void **state)
{
    int mport = tc_free_port();
    char *log;
    tc_cluster_t cl;

    (void)state;
    start_tenants(&cl, 2, "--transport ucx", " --allow-shared-dataplane", mport, 0);
    assert_stats_dataplane(mport, "\"dataplane\":{\"transport\":\"ucx\",\"enforces_keys\":false,"
                                  "\"isolated\":false,\"allow_shared_dataplane\":true}");
    log = node_log(&cl);
    assert_int_equal(count(log, "allow_shared_dataplane=true: tenants_file names 2 tenants"), 1);
    free(log);
    assert_int_equal(hello_code(cl.node[0].addr, TOK_A, "alpha"), 0);
    assert_int_equal(hello_code(cl.node[0].addr, TOK_B, "beta"), 0);

    /* Every reload that keeps two tenants warns again. */
    kill(cl.node[0].pid, SIGHUP);
    for (int i = 0; i < 100; i++) {
        log = node_log(&cl);
        if (count(log, "allow_shared_dataplane=true: tenants_file names 2 tenants") == 2) {
            free(log);
            break;
        }
        free(log);
        assert_true(i < 99);
        usleep(50000);
    }
    assert_true(tc_metric(mport, "strata_dataplane_isolated") == 0);
    tc_stop_all(&cl);
}

static void test_two_tenants_over_libfabric_start(void **state)
{
    int mport = tc_free_port();
    tc_cluster_t cl;

    (void)state;
    start_tenants(&cl, 2, "--transport libfabric --fabric-provider tcp;ofi_rxm", "", mport, 1);
    assert_stats_dataplane(mport, "\"dataplane\":{\"transport\":\"libfabric\","
                                  "\"enforces_keys\":true,\"isolated\":true");
    assert_int_equal(hello_code(cl.node[0].addr, TOK_A, "alpha"), 0);
    assert_int_equal(hello_code(cl.node[0].addr, TOK_B, "beta"), 0);
    tc_stop_all(&cl);
}

/* Waits until the log holds needle n times (5 s at most); returns the log. */
static char *wait_log(const tc_cluster_t *c, const char *needle, int n)
{
    for (int i = 0;; i++) {
        char *log = node_log(c);

        if (count(log, needle) >= n || i == 100) {
            return log;
        }
        free(log);
        usleep(50000);
    }
}

static void test_reload_to_two_tenants_refused(void **state)
{
    int mport = tc_free_port();
    char *log;
    tc_cluster_t cl;

    (void)state;
    start_tenants(&cl, 1, "--transport ucx", "", mport, 1);
    assert_int_equal(hello_code(cl.node[0].addr, TOK_B, "beta"), GRPC_STATUS_UNAUTHENTICATED);
    write_tenants(2);
    kill(cl.node[0].pid, SIGHUP);
    log = wait_log(&cl, "tenants_file reload refused, the old table stays", 1);
    print_message("%s", log);
    assert_non_null(strstr(log, "tenants_file reload refused, the old table stays"));
    assert_refusal_message(log);
    assert_null(strstr(log, "tenants reloaded"));
    free(log);
    /* The old table: alpha still served, beta still unknown, still isolated. */
    assert_int_equal(hello_code(cl.node[0].addr, TOK_A, "alpha"), 0);
    assert_int_equal(hello_code(cl.node[0].addr, TOK_B, "beta"), GRPC_STATUS_UNAUTHENTICATED);
    assert_true(tc_metric(mport, "strata_dataplane_isolated") == 1);
    /* Back to one tenant: reloaded. */
    write_tenants(1);
    kill(cl.node[0].pid, SIGHUP);
    log = wait_log(&cl, "tenants reloaded", 1);
    assert_non_null(strstr(log, "tenants reloaded"));
    free(log);
    tc_stop_all(&cl);

    /* With the opt-in the same reload is taken, warned, and the gauge drops. */
    start_tenants(&cl, 1, "--transport ucx", " --allow-shared-dataplane", mport, 1);
    write_tenants(2);
    kill(cl.node[0].pid, SIGHUP);
    log = wait_log(&cl, "tenants reloaded", 1);
    assert_non_null(strstr(log, "tenants reloaded"));
    assert_non_null(strstr(log, "allow_shared_dataplane=true: tenants_file names 2 tenants"));
    free(log);
    assert_int_equal(hello_code(cl.node[0].addr, TOK_B, "beta"), 0);
    assert_true(tc_metric(mport, "strata_dataplane_isolated") == 0);
    tc_stop_all(&cl);
}

/* transport none: no data plane, nothing to isolate. */
static void test_transport_none_unaffected(void **state)
{
    int mport = tc_free_port();
    tc_cluster_t cl;

    (void)state;
    start_tenants(&cl, 2, "--transport none", "", mport, 1);
    tc_stop_all(&cl);
}

/* The group's set-up names the tenants file; its state is that name, which
 * tm_group_unlink removes at the end. */
static int group_setup(void **state)
{
    snprintf(tenants_path, sizeof(tenants_path), "/tmp/strata-iso-tenants-%d", (int)getpid());
    *state = tenants_path;
    return 0;
}

TM_STRATAD_GROUP_MAIN(NULL, "STRATAD", &stratad_path, group_setup, tm_group_unlink,
                      cmocka_unit_test(test_two_tenants_over_ucx_refused),
                      cmocka_unit_test(test_one_tenant_over_ucx_starts),
                      cmocka_unit_test(test_opt_in_starts_with_gauge_zero),
                      cmocka_unit_test(test_two_tenants_over_libfabric_start),
                      cmocka_unit_test(test_reload_to_two_tenants_refused),
                      cmocka_unit_test(test_transport_none_unaffected))
