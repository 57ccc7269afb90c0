/*
 * cli_load.c - `strata load`: the options, the engine threads and their
 * open-loop schedules, the progress line, --processes, the exit code
 * (cli_load.h has the layers; docs/cli.md the workload and the report).
 *
 * Open loop: engine i plans its calls as a Poisson process of rate
 * rate / engines and runs each at its planned time, or at once when it is
 * late. Latency is measured from the planned time, so time spent queued
 * behind a slow call counts (no coordinated omission). Calls planned in the
 * warm-up are run but not counted.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <semaphore.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "cli_load.h"
#include "clock.h"

#define CLI_OFF(m) offsetof(cli_conf_t, m)

/* Engines that write their sessions' first turns at once, before the clock starts: all 64
 * at once time out on two cores, which is a burst no run measures. */
#define LOAD_SETUP_SLOTS 4

const cfg_option_t cli_load_opts[] = {
    {"engines", CFG_INT, CLI_OFF(engines), "64", 1, 4096, 0, NULL, 0,
     "simulated engines: threads, each with its own sessions, schedule and connection"},
    {"processes", CFG_INT, CLI_OFF(processes), "1", 1, 64, 0, NULL, 0,
     "processes that split the engines and the rate (one libstrata client each)"},
    {"rate", CFG_INT, CLI_OFF(rate), "200", 1, 10000000, 0, NULL, 0,
     "offered calls per second, all engines together: Poisson arrivals"},
    {"duration", CFG_DURATION, CLI_OFF(duration_ms), "10s", 100, 86400000, 0, NULL, 0,
     "the measured window after the warm-up (e.g. 30s; a plain number is ms)"},
    {"warmup", CFG_DURATION, CLI_OFF(warmup_ms), "2s", 0, 86400000, 0, NULL, 0,
     "calls run first and not counted (e.g. 5s)"},
    {"mix", CFG_STRING, CLI_OFF(mix), "lookup=40,get=30,rows=20,put=10", 0, 0, 0, NULL, 0,
     "weights of the call kinds: lookup, get (a segment of whole KV objects), rows (decode "
     "row reads), put (a turn: new blocks, KDA checkpoints, session append)"},
    {"mix_sessions", CFG_STRING, CLI_OFF(mix_sessions), "chat=70,doc=25,agent=5", 0, 0, 0, NULL, 0,
     "weights of the session kinds: chat (2-8K tokens), doc (32-128K), agent (grows to 1M)"},
    {"sessions", CFG_INT, CLI_OFF(sessions), "4", 1, 1024, 0, NULL, 0,
     "sessions per engine (a session that reached its length is replaced by a new one)"},
    {"layers", CFG_INT, CLI_OFF(layers), "1", 1, 128, 0, NULL, 0, "KV objects per block"},
    {"kv_bytes", CFG_INT, CLI_OFF(kv_bytes), "4096", 32, 1 << 24, 0, NULL, 0,
     "bytes of one KV object (default 64 rows of 64 B; the 2.8T shape's is 41984)"},
    {"row_bytes", CFG_INT, CLI_OFF(row_bytes), "64", 32, 1 << 20, 0, NULL, 0,
     "bytes of one row of a KV object (kv_bytes must be a multiple)"},
    {"kda_bytes", CFG_INT, CLI_OFF(kda_bytes), "16384", 1, 1 << 26, 0, NULL, 0,
     "bytes of one KDA checkpoint (every 16 blocks and at the end of each turn)"},
    {"get_blocks", CFG_INT, CLI_OFF(get_blocks), "16", 1, 65536, 0, NULL, 0,
     "consecutive blocks one get reads (16: a segment of a whole-prefix load)"},
    {"rows_blocks", CFG_INT, CLI_OFF(rows_blocks), "16", 1, 65536, 0, NULL, 0,
     "blocks one rows call reads rows of"},
    {"rows_per_block", CFG_INT, CLI_OFF(rows_per_block), "4", 1, 4096, 0, NULL, 0,
     "rows read of each of those blocks"},
    {"big_load", CFG_BOOL, CLI_OFF(big_load), "false", 0, 0, 0, NULL, 0,
     "one more engine loads a --big-tokens prefix whole, again and again (big_get)"},
    {"big_tokens", CFG_INT, CLI_OFF(big_tokens), "1048576", 64, 1 << 24, 0, NULL, 0,
     "tokens of --big-load's prefix"},
    {"report", CFG_STRING, CLI_OFF(report), "", 0, 0, 0, NULL, 0,
     "also write the report as JSON to this file"},
    {"peer", CFG_STRING, CLI_OFF(peer), "", 0, 0, 0, NULL, 0,
     "redis:HOST:PORT: drive that Redis with the same calls instead of the cluster"},
    {"fail_on_error", CFG_BOOL, CLI_OFF(fail_on_error), "false", 0, 0, 0, NULL, 0,
     "exit 1 on any error other than a refusal (ST_ERR_OVERLOADED, ST_ERR_EXHAUSTED)"},
    {"seed", CFG_INT, CLI_OFF(seed), "1", 0, INT64_MAX, 0, NULL, 0,
     "seed of the sessions, their tokens and the schedule"},
};

static const char *const load_call_names[4] = {"lookup", "get", "rows", "put"};

/* One process's run: its engines (the big one last), their lanes and threads, the clock. */
typedef struct load_run {
    load_conf_t lc;
    int first, n;       /* engines [first, first + n) of lc.engines */
    int big;            /* this process runs the --big-load engine */
    int index;          /* the process, for the progress line */
    st_client_t *c;     /* strata: shared by the engines */
    st_client_t *c_big; /* strata: the big engine's own (its own connections, as a separate
                           engine process has: its own flow in the daemons' fair queueing) */
    load_backend_t **be;
    load_engine_t *eng;
    load_lane_t *lane; /* 4 per engine (LK_LOOKUP..LK_PUT), then the big engine's */
    int n_lanes;
    pthread_t *th;
    pthread_mutex_t mu; /* with cv: the lanes' setup done (ready), the clock set (go) */
    pthread_cond_t cv;
    int ready, go;
    uint64_t t0, t_meas, t_end, grace;
    atomic_int stop, running; /* running: lane threads not yet ended */
    atomic_int setup_failed;  /* first turns that failed */
    sem_t setup_slots;        /* engines writing their first turns at once */
} load_run_t;

typedef struct load_arg {
    load_run_t *run;
    int i;
} load_arg_t;

/* Options into lc; prints what was wrong. Returns 0 or 2 (usage). */
static int load_conf(const cli_conf_t *cf, load_conf_t *lc)
{
    char err[256];

    memset(lc, 0, sizeof(*lc));
    lc->engines = (int)cf->engines;
    lc->processes = (int)(cf->processes < cf->engines ? cf->processes : cf->engines);
    lc->sessions = (int)cf->sessions;
    lc->rate = (double)cf->rate;
    lc->duration_ns = cf->duration_ms * 1000000ull;
    lc->warmup_ns = cf->warmup_ms * 1000000ull;
    lc->layers = (uint32_t)cf->layers;
    lc->kv_bytes = (uint32_t)cf->kv_bytes;
    lc->row_bytes = (uint32_t)cf->row_bytes;
    lc->kda_bytes = (uint32_t)cf->kda_bytes;
    lc->get_blocks = (uint32_t)cf->get_blocks;
    lc->rows_blocks = (uint32_t)cf->rows_blocks;
    lc->rows_per_block = (uint32_t)cf->rows_per_block;
    lc->big_tokens = cf->big_load ? (uint64_t)cf->big_tokens : 0;
    lc->seed = (uint64_t)cf->seed;
    lc->run_id = (cm_real_us() ^ ((uint64_t)getpid() << 40)) % 1000000000000ull;
    lc->fail_on_error = cf->fail_on_error;
    if (load_mix_parse(cf->mix, load_call_names, 4, lc->mix, err, sizeof(err)) != 0) {
        fprintf(stderr, "strata load: --mix %s: %s\n", cf->mix, err);
        return 2;
    }
    if (load_mix_parse(cf->mix_sessions, load_session_names, LS_N, lc->smix, err, sizeof(err))) {
        fprintf(stderr, "strata load: --mix-sessions %s: %s\n", cf->mix_sessions, err);
        return 2;
    }
    if (lc->kv_bytes % lc->row_bytes != 0) {
        fprintf(stderr, "strata load: --kv-bytes %u is not a multiple of --row-bytes %u\n",
                lc->kv_bytes, lc->row_bytes);
        return 2;
    }
    if (cf->peer[0] != '\0') {
        static char host[256];
        const char *colon = strrchr(cf->peer, ':');
        char *end;
        long port = colon ? strtol(colon + 1, &end, 10) : 0;

        if (strncmp(cf->peer, "redis:", 6) != 0 || colon == cf->peer + 5 || *end != '\0' ||
            port < 1 || port > 65535 || (size_t)(colon - cf->peer - 6) >= sizeof(host)) {
            fprintf(stderr, "strata load: --peer %s: expected redis:HOST:PORT\n", cf->peer);
            return 2;
        }
        memcpy(host, cf->peer + 6, (size_t)(colon - cf->peer - 6));
        host[colon - cf->peer - 6] = '\0';
        lc->peer_host = host;
        lc->peer_port = (int)port;
    }
    return 0;
}

static void load_sleep_until(uint64_t t_ns)
{
    struct timespec ts = {(time_t)(t_ns / 1000000000ull), (long)(t_ns % 1000000000ull)};

    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
    }
}

/* Counts one call of lane l planned at planned (0: not measured), done at now. */
static void load_count(load_run_t *run, load_lane_t *l, int kind, const load_result_t *r,
                       uint64_t planned, uint64_t now)
{
    pthread_mutex_lock(&l->e->mu);
    l->e->done++;
    l->e->failed += r->status != ST_OK;
    if (planned >= run->t_meas) {
        load_record(l->e, kind, r, now - planned);
        l->e->st.issued++;
    }
    pthread_mutex_unlock(&l->e->mu);
}

/* A lane's open loop: its calls at their planned times, until the end. */
static void load_lane_loop(load_run_t *run, load_lane_t *l)
{
    const load_conf_t *lc = &run->lc;
    double w = (double)lc->mix[l->kind], sum = 0;
    double mean;
    uint64_t next, last = run->t_end, skipped = 0;

    for (int k = 0; k < 4; k++) {
        sum += lc->mix[k];
    }
    if (w == 0) {
        return;
    }
    mean = 1e9 * (double)lc->engines * sum / (lc->rate * w);
    next = run->t0 + load_rng_exp(&l->rng, mean);
    while (next < run->t_end && !atomic_load(&run->stop)) {
        load_result_t r;
        uint64_t now;

        load_sleep_until(next);
        load_call(l, &r);
        now = cm_mono_ns();
        load_count(run, l, l->kind, &r, next, now);
        last = next >= run->t_meas && now > last ? now : last;
        next += load_rng_exp(&l->rng, mean);
        if (now > run->t_end + run->grace) {
            break; /* far behind: what it planned and did not run counts as issued only */
        }
    }
    for (; next < run->t_end; next += load_rng_exp(&l->rng, mean)) {
        skipped += next >= run->t_meas;
    }
    pthread_mutex_lock(&l->e->mu);
    l->e->st.issued += skipped;
    if (last - run->t_meas > l->e->st.elapsed) {
        l->e->st.elapsed = last - run->t_meas;
    }
    pthread_mutex_unlock(&l->e->mu);
}

/* --big-load's lane: loads its prefix whole, one load after another, until the end. */
static void load_big_loop(load_run_t *run, load_lane_t *l)
{
    uint64_t start;

    while ((start = cm_mono_ns()) < run->t_end && !atomic_load(&run->stop)) {
        load_result_t r;

        load_big_get(l, &r);
        load_count(run, l, LK_BIG_GET, &r, start >= run->t_meas ? start : 0, cm_mono_ns());
    }
}

/* A lane's thread: its part of the setup, the two barriers, its loop. */
static void *load_lane_main(void *arg)
{
    load_run_t *run = ((load_arg_t *)arg)->run;
    load_lane_t *l = &run->lane[((load_arg_t *)arg)->i];
    st_status_t st = ST_OK;

    if (l->kind == LK_PUT || l->kind == LK_BIG_GET) {
        int failed = 0;

        while (sem_wait(&run->setup_slots) != 0) {
        }
        st = l->kind == LK_PUT ? load_engine_prefill(l, &failed) : load_big_setup(l);
        sem_post(&run->setup_slots);
        if (l->kind == LK_BIG_GET && st != ST_OK && st != ST_ERR_NOMEM) {
            failed = 1; /* part of the big prefix is missing: its loads will say so */
            st = ST_OK;
        }
        atomic_fetch_add(&run->setup_failed, failed);
    }
    if (st != ST_OK) {
        fprintf(stderr, "strata load: setup of engine %d failed: %s (%s)\n", l->e->id,
                st_status_name(st), st_client_last_error());
        atomic_store(&run->stop, 1);
    }
    pthread_mutex_lock(&run->mu);
    run->ready++;
    pthread_cond_broadcast(&run->cv);
    while (!run->go) {
        pthread_cond_wait(&run->cv, &run->mu);
    }
    pthread_mutex_unlock(&run->mu);
    if (!atomic_load(&run->stop)) {
        if (l->kind == LK_BIG_GET) {
            load_big_loop(run, l);
        } else {
            load_lane_loop(run, l);
        }
    }
    atomic_fetch_sub(&run->running, 1);
    return NULL;
}

/* The run's counts so far: into *st (all engines), done and failed calls. */
static void load_collect(load_run_t *run, load_stats_t *st, uint64_t *done, uint64_t *failed)
{
    memset(st, 0, sizeof(*st));
    *done = *failed = 0;
    for (int i = 0; i < run->n + run->big; i++) {
        load_engine_t *e = &run->eng[i];

        pthread_mutex_lock(&e->mu);
        load_stats_merge(st, &e->st);
        *done += i < run->n ? e->done : 0; /* the engines' calls: not the big loads */
        *failed += e->failed;
        pthread_mutex_unlock(&e->mu);
    }
}

/* Prints a progress line each second on stderr until every engine ended, then joins them. */
static void load_progress(load_run_t *run, int n_threads)
{
    load_stats_t *st = malloc(sizeof(*st));
    load_hist_t *all = malloc(sizeof(*all));
    uint64_t prev = 0, t = run->t0, done, failed;

    while (st != NULL && all != NULL && atomic_load(&run->running) > 0) {
        uint64_t tick = t + 1000000000ull;

        while (cm_mono_ns() < tick && atomic_load(&run->running) > 0) {
            load_sleep_until(cm_mono_ns() + 50000000ull);
        }
        if (atomic_load(&run->running) == 0) {
            break;
        }
        t = tick;
        load_collect(run, st, &done, &failed);
        memset(all, 0, sizeof(*all));
        for (int k = 0; k < LK_BIG_GET; k++) {
            load_hist_merge(all, &st->k[k].lat); /* the engines' calls: big_get is apart */
        }
        fprintf(stderr,
                "strata load[%d]: %3.0f s %-8s ops/s %.0f (offered %.0f) errors %" PRIu64
                " p99 %.2f ms wrong_bytes %" PRIu64 "\n",
                run->index, (double)(t - run->t0) / 1e9, t <= run->t_meas ? "warm-up" : "measured",
                (double)(done - prev), run->lc.rate / run->lc.processes, failed,
                (double)load_hist_quantile(all, 0.99) / 1e6, st->wrong_bytes);
        prev = done;
    }
    for (int i = 0; i < n_threads; i++) {
        pthread_join(run->th[i], NULL);
    }
    free(st), free(all);
}

static void load_run_close(load_run_t *run)
{
    for (int i = 0; run->lane != NULL && i < run->n_lanes; i++) {
        load_lane_free(&run->lane[i]);
    }
    for (int i = 0; run->eng != NULL && i < run->n + run->big; i++) {
        if (run->eng[i].sess != NULL) {
            load_engine_free(&run->eng[i]);
        }
    }
    for (int i = 0; run->be != NULL && i < run->n_lanes; i++) {
        if (run->be[i] != NULL && (i == 0 || run->be[i] != run->be[0])) {
            run->be[i]->ops->close(run->be[i]);
        }
    }
    if (run->c != NULL) {
        st_client_close(run->c);
    }
    if (run->c_big != NULL) {
        st_client_close(run->c_big);
    }
    free(run->eng), free(run->be), free(run->lane), free(run->th);
}

/*
 * Connects engines [first, first + n) (and the big one) and sets up their
 * lanes: one libstrata client for all of them (it is thread-safe), or one
 * Redis connection per lane (a hiredis context is not). Prints what failed.
 */
static int load_run_open(load_run_t *run, const cli_conf_t *cf)
{
    size_t ne = (size_t)run->n + (size_t)run->big, nl = 4 * (size_t)run->n + (size_t)run->big;

    run->n_lanes = (int)nl;
    run->eng = calloc(ne, sizeof(*run->eng));
    run->be = calloc(nl, sizeof(*run->be));
    run->lane = calloc(nl, sizeof(*run->lane));
    run->th = calloc(nl, sizeof(*run->th));
    if (run->eng == NULL || run->be == NULL || run->lane == NULL || run->th == NULL) {
        fprintf(stderr, "strata load: out of memory\n");
        return -1;
    }
    if (run->lc.peer_host == NULL &&
        (cli_connect(cf, &run->c) != ST_OK || load_backend_strata(run->c, &run->be[0]) != ST_OK)) {
        return -1;
    }
    if (run->lc.peer_host == NULL && run->big &&
        (cli_connect(cf, &run->c_big) != ST_OK ||
         load_backend_strata(run->c_big, &run->be[nl - 1]) != ST_OK)) {
        return -1;
    }
    for (int i = 0; i < run->n_lanes; i++) {
        int eng = i < 4 * run->n ? i / 4 : run->n, kind = i < 4 * run->n ? i % 4 : LK_BIG_GET;

        if (run->lc.peer_host != NULL) {
            if (load_backend_redis(run->lc.peer_host, run->lc.peer_port, &run->be[i]) != ST_OK) {
                return -1;
            }
        } else if (kind != LK_BIG_GET) {
            run->be[i] = run->be[0];
        }
        if ((kind == LK_LOOKUP || kind == LK_BIG_GET) &&
            load_engine_init(&run->eng[eng], &run->lc, run->be[i], run->first + eng,
                             kind == LK_BIG_GET ? 1 : run->lc.sessions) != ST_OK) {
            fprintf(stderr, "strata load: out of memory\n");
            return -1;
        }
        if (load_lane_init(&run->lane[i], &run->eng[eng], run->be[i], kind) != ST_OK) {
            fprintf(stderr, "strata load: out of memory\n");
            return -1;
        }
    }
    return 0;
}

/* Runs the lanes of run until the end; merges their counts into *st. */
static int load_run_go(load_run_t *run, load_stats_t *st)
{
    int n = run->n_lanes, started = 0;
    load_arg_t *args = calloc((unsigned)n, sizeof(*args));
    uint64_t done, failed;

    if (args == NULL) {
        return -1;
    }
    pthread_mutex_init(&run->mu, NULL);
    pthread_cond_init(&run->cv, NULL);
    sem_init(&run->setup_slots, 0, LOAD_SETUP_SLOTS);
    atomic_store(&run->running, n);
    for (; started < n; started++) {
        args[started] = (load_arg_t){run, started};
        if (pthread_create(&run->th[started], NULL, load_lane_main, &args[started]) != 0) {
            fprintf(stderr, "strata load: cannot start %d threads\n", n);
            atomic_store(&run->stop, 1);
            atomic_fetch_sub(&run->running, n - started);
            break;
        }
    }
    pthread_mutex_lock(&run->mu);
    while (run->ready < started) {
        pthread_cond_wait(&run->cv, &run->mu); /* every session's first turn is written */
    }
    if (atomic_load(&run->setup_failed) > 0) {
        fprintf(stderr,
                "strata load: %d of %d first turns failed in the setup (those sessions "
                "start with less written)\n",
                atomic_load(&run->setup_failed), run->n * run->lc.sessions);
    }
    run->t0 = cm_mono_ns();
    run->t_meas = run->t0 + run->lc.warmup_ns;
    run->t_end = run->t_meas + run->lc.duration_ns;
    run->grace = run->lc.duration_ns > 10000000000ull ? run->lc.duration_ns : 10000000000ull;
    run->go = 1;
    pthread_cond_broadcast(&run->cv);
    pthread_mutex_unlock(&run->mu);
    load_progress(run, started);
    pthread_cond_destroy(&run->cv);
    pthread_mutex_destroy(&run->mu);
    sem_destroy(&run->setup_slots);
    free(args);
    load_collect(run, st, &done, &failed);
    return started < n || atomic_load(&run->stop) ? -1 : 0;
}

/* One process's share: engines [first, first + n); the big engine in process 0. */
static int load_process(const cli_conf_t *cf, const load_conf_t *lc, int index, load_stats_t *st)
{
    load_run_t run;
    int rc;

    memset(&run, 0, sizeof(run));
    run.lc = *lc;
    run.index = index;
    run.first = (int)((int64_t)lc->engines * index / lc->processes);
    run.n = (int)((int64_t)lc->engines * (index + 1) / lc->processes) - run.first;
    run.big = index == 0 && lc->big_tokens > 0;
    rc = load_run_open(&run, cf);
    if (rc == 0) {
        rc = load_run_go(&run, st);
    }
    load_run_close(&run);
    return rc;
}

/* Writes (write_it) or reads all len bytes of buf to or from fd. Returns 0, or -1 at an error or
 * an early end. */
static int load_pipe_io(int fd, void *buf, size_t len, int write_it)
{
    for (size_t off = 0; off < len;) {
        ssize_t n = write_it ? write(fd, (const char *)buf + off, len - off)
                             : read(fd, (char *)buf + off, len - off);

        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            return -1;
        }
        off += (size_t)n;
    }
    return 0;
}

/*
 * --processes P: forks P processes before anything connects; each runs its
 * share and writes its counts (plain data) to a pipe; they are merged here.
 */
static int load_processes(const cli_conf_t *cf, const load_conf_t *lc, load_stats_t *st)
{
    load_stats_t *part = malloc(sizeof(*part));
    pid_t pid[64];
    int fd[64], rc = part == NULL ? -1 : 0, n = 0;

    for (int p = 0; rc == 0 && p < lc->processes; p++, n++) {
        int pp[2];

        if (pipe(pp) != 0 || (pid[p] = fork()) < 0) {
            fprintf(stderr, "strata load: cannot start process %d: %s\n", p, strerror(errno));
            rc = -1;
            break;
        }
        if (pid[p] == 0) {
            close(pp[0]);
            memset(part, 0, sizeof(*part));
            _exit(load_process(cf, lc, p, part) == 0 &&
                          load_pipe_io(pp[1], part, sizeof(*part), 1) == 0
                      ? 0
                      : 1);
        }
        close(pp[1]);
        fd[p] = pp[0];
    }
    for (int p = 0; p < n; p++) {
        int status = 0;

        if (load_pipe_io(fd[p], part, sizeof(*part), 0) == 0) {
            load_stats_merge(st, part);
        } else {
            rc = -1;
        }
        close(fd[p]);
        waitpid(pid[p], &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "strata load: process %d failed\n", p);
            rc = -1;
        }
    }
    free(part);
    return rc;
}

int cli_load(const cli_conf_t *cf, int argc, char **argv)
{
    load_stats_t *st = calloc(1, sizeof(*st));
    load_conf_t lc;
    const char *backend;
    int rc;

    (void)argc, (void)argv;
    if (st == NULL) {
        fprintf(stderr, "strata load: out of memory\n");
        return 1;
    }
    rc = load_conf(cf, &lc);
    if (rc != 0) {
        free(st);
        return rc;
    }
    backend = lc.peer_host != NULL ? "redis" : "strata";
    fprintf(stderr,
            "strata load: %d engines in %d process%s against %s, %.0f calls/s, %.1f s warm-up, "
            "%.1f s measured%s\n",
            lc.engines, lc.processes, lc.processes > 1 ? "es" : "", backend, lc.rate,
            (double)lc.warmup_ns / 1e9, (double)lc.duration_ns / 1e9,
            lc.big_tokens ? ", with --big-load" : "");
    rc = lc.processes > 1 ? load_processes(cf, &lc, st) : load_process(cf, &lc, 0, st);
    if (rc != 0) {
        free(st);
        return 1;
    }
    load_report_text(stdout, &lc, st, backend);
    if (cf->report[0] != '\0' && load_report_json(cf->report, &lc, st, backend) != 0) {
        rc = 1;
    }
    if (st->wrong_bytes != 0) {
        fprintf(stderr, "strata load: %" PRIu64 " wrong bytes came back\n", st->wrong_bytes);
        rc = 1;
    } else if (lc.fail_on_error && load_hard_errors(st) != 0) {
        fprintf(stderr, "strata load: %" PRIu64 " calls failed with errors other than refusals\n",
                load_hard_errors(st));
        rc = 1;
    }
    free(st);
    return rc;
}
