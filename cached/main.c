/*
 * main.c - stratad: parse the config, start the daemon, serve until SIGTERM
 * or SIGINT, then stop gracefully (calls in flight finish; new calls get
 * UNAVAILABLE). SIGHUP re-reads the tenants file, the TLS files and the
 * peers of the config file and flags (static mode's member change). SIGTERM
 * after a Drain call, or with drain_on_term, drains first (docs/daemon.md
 * "Membership changes"). Under a service manager ($NOTIFY_SOCKET, notify.h)
 * it says READY=1 once the SSD index is rebuilt and every listener is up,
 * RELOADING=1 around a SIGHUP and STOPPING=1 when a stop begins.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "daemon.h"
#include "fault.h"
#include "log.h"

#define CD_GRACE_MS 10000

/* READY=1 with the node's addresses as its STATUS= line. */
static void cd_main_ready(cd_daemon_t *d)
{
    char msg[512];

    snprintf(msg, sizeof(msg), "READY=1\nSTATUS=serving node=%s port=%d metrics_port=%d",
             d->cfg.node_id, cd_daemon_port(d), d->metrics_port);
    cd_notify_send(&d->notify, msg);
}

/* RELOADING=1 with the monotonic time that systemd 253's Type=notify-reload
 * asks for (older managers ignore MONOTONIC_USEC). */
static void cd_main_reloading(cd_daemon_t *d)
{
    char msg[160];

    snprintf(msg, sizeof(msg),
             "RELOADING=1\nMONOTONIC_USEC=%llu\nSTATUS=reloading the tenants file, the TLS "
             "files and the peers",
             (unsigned long long)cm_mono_us());
    cd_notify_send(&d->notify, msg);
}

/*
 * SIGHUP's member change: parses the command line again (the config file as
 * it is now, then the flags, as at start) and applies its peers. A file that
 * no longer parses changes nothing (logged).
 */
static void cd_reload_peers(cd_daemon_t *d, int argc, char **argv)
{
    char **args = malloc(sizeof(*args) * ((size_t)argc + 1));
    char err[512] = "";
    cd_config_t cfg;
    int n_pos = 0, help = 0;

    if (args == NULL) {
        lg_error("SIGHUP: no memory to re-read the peers");
        return;
    }
    memcpy(args, argv, sizeof(*args) * ((size_t)argc + 1));
    memset(&cfg, 0, sizeof(cfg));
    if (cfg_defaults(&cd_config_table, &cfg) != ST_OK ||
        cfg_parse_args(&cd_config_table, &cfg, argc, args, &n_pos, &help, err, sizeof(err)) !=
            ST_OK) {
        lg_error("SIGHUP: the configuration no longer parses, peers unchanged: %s", err);
    } else {
        (void)cd_members_reload_static(d, cfg.peers);
    }
    cfg_free(&cd_config_table, &cfg);
    free(args);
}

static int cd_write_pid(const char *path)
{
    FILE *f = fopen(path, "w");

    if (f == NULL) {
        lg_error("cannot write pid_file path=%s: %s", path, strerror(errno));
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
    int rc, sig = 0, code = 0;
    char **argv0 = malloc(sizeof(*argv0) * ((size_t)argc + 1));
    st_status_t status;

    lg_set_ident("stratad");
    if (argv0 == NULL) {
        return 1;
    }
    memcpy(argv0, argv, sizeof(*argv0) * ((size_t)argc + 1)); /* cfg_main reorders argv */
    rc = cfg_main(&cd_config_table, &cfg, sizeof(cfg), argc, argv, "STRATAD_MARKDOWN");
    if (rc >= 0) {
        free(argv0);
        return rc;
    }
    lg_set_level((lg_level_t)cfg.log_level);
    cd_fault_announce();

    /* Every thread inherits the blocked signals; main waits for them. */
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    status = cd_daemon_start(&d, &cfg);
    if (status != ST_OK) {
        lg_error("stratad did not start: %s", st_strerror(status));
        cd_notify_send(&d.notify, "STATUS=did not start (see the log)");
        cd_daemon_stop(&d, 0);
        cd_daemon_destroy(&d);
        free(argv0);
        return 1;
    }
    if (d.cfg.pid_file != NULL && d.cfg.pid_file[0] != '\0' && cd_write_pid(d.cfg.pid_file) != 0) {
        cd_daemon_stop(&d, 0);
        cd_daemon_destroy(&d);
        free(argv0);
        return 1;
    }
    /* After cd_daemon_start: the tier recovered, gRPC and metrics listening. */
    cd_main_ready(&d);
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
        lg_info("signal received signal=SIGHUP: reloading the tenants file, the TLS files and "
                "the peers");
        cd_main_reloading(&d);
        (void)cd_daemon_reload(&d);
        (void)cd_daemon_reload_tls(&d);
        cd_reload_peers(&d, argc, argv0);
        cd_main_ready(&d);
    }
    lg_info("signal received signal=%s", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    cd_notify_send(&d.notify, "STOPPING=1\nSTATUS=stopping: finishing calls in flight");
    if (sig == SIGTERM &&
        (atomic_load(&d.draining) || d.cfg.drain_on_term || cd_members_dynamic(&d)) &&
        cd_daemon_drain(&d) != ST_OK) {
        code = 1; /* stopped with durable objects not handed over (logged) */
    }
    cd_daemon_stop(&d, CD_GRACE_MS);
    cd_daemon_destroy(&d);
    free(argv0);
    lg_info("stopped");
    return code;
}
