/*
 * main.c - stratad: parse the config, start the daemon, serve until SIGTERM
 * or SIGINT, then stop gracefully (calls in flight finish; new calls get
 * UNAVAILABLE). SIGHUP re-reads the tenants file and the TLS files.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon.h"
#include "st_log.h"

#define CD_GRACE_MS 10000

static int cd_write_pid(const char *path)
{
    FILE *f = fopen(path, "w");

    if (f == NULL) {
        st_error("cannot write pid_file path=%s: %s", path, strerror(errno));
        return -1;
    }
    fprintf(f, "%d\n", (int)getpid());
    fclose(f);
    return 0;
}

int main(int argc, char **argv)
{
    cd_config_t cfg;
    cd_daemon_t d;
    sigset_t sigs;
    char err[512];
    int npos = 0, help = 0, sig = 0;
    st_status_t status;

    memset(&cfg, 0, sizeof(cfg));
    st_log_set_ident("stratad");
    if (st_config_defaults(&cd_config_table, &cfg) != ST_OK) {
        fprintf(stderr, "stratad: a default of the config table does not parse (a bug), or "
                        "out of memory\n");
        return 1;
    }
    status =
        st_config_parse_args(&cd_config_table, &cfg, argc, argv, &npos, &help, err, sizeof(err));
    if (status != ST_OK) {
        fprintf(stderr, "stratad: %s\n", err);
        st_config_free(&cd_config_table, &cfg);
        return 2;
    }
    if (help) {
        st_config_usage(&cd_config_table, stdout);
        st_config_free(&cd_config_table, &cfg);
        return 0;
    }
    if (npos > 0) {
        fprintf(stderr, "stratad: unexpected argument '%s' (see stratad --help)\n", argv[1]);
        st_config_free(&cd_config_table, &cfg);
        return 2;
    }
    if (getenv("STRATAD_MARKDOWN") != NULL) {
        st_config_markdown(&cd_config_table, stdout);
        st_config_free(&cd_config_table, &cfg);
        return 0;
    }
    st_log_set_level((st_log_level_t)cfg.log_level);

    /* Every thread inherits the blocked signals; main waits for them. */
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    status = cd_daemon_start(&d, &cfg);
    if (status != ST_OK) {
        st_error("stratad did not start: %s", st_strerror(status));
        cd_daemon_stop(&d, 0);
        cd_daemon_destroy(&d);
        return 1;
    }
    if (d.cfg.pid_file != NULL && d.cfg.pid_file[0] != '\0' && cd_write_pid(d.cfg.pid_file) != 0) {
        cd_daemon_stop(&d, 0);
        cd_daemon_destroy(&d);
        return 1;
    }
    /* The line scripts wait for. */
    printf("stratad ready node=%s port=%d metrics_port=%d\n", d.cfg.node_id, cd_daemon_port(&d),
           d.metrics_port);
    fflush(stdout);

    for (;;) {
        while (sigwait(&sigs, &sig) != 0) {
        }
        if (sig != SIGHUP) {
            break;
        }
        /* Re-reads the tenants file and the TLS files; calls in flight are not
         * disturbed (tenants.h); a failure is logged and the old ones stay. */
        st_info("signal received signal=SIGHUP: reloading the tenants file and the TLS files");
        (void)cd_daemon_reload(&d);
        (void)cd_daemon_reload_tls(&d);
    }
    st_info("signal received signal=%s", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    cd_daemon_stop(&d, CD_GRACE_MS);
    cd_daemon_destroy(&d);
    st_info("stopped");
    return 0;
}
