/* peer_redis.c - see peer_redis.h. */
#include "peer_redis.h"

#include "cluster.h" /* tc_free_port: the daemons' own choice of a free port */

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int bench_redis_start(bench_redis_t *r, unsigned long long mem_bytes)
{
    char port[16], mem[32];

    memset(r, 0, sizeof(*r));
    r->port = tc_free_port();
    snprintf(r->dir, sizeof(r->dir), "/tmp/strata_bench_redis_XXXXXX");
    if (r->port < 0 || mkdtemp(r->dir) == NULL) {
        fprintf(stderr, "redis peer: cannot get a port or a directory\n");
        return -1;
    }
    snprintf(port, sizeof(port), "%d", r->port);
    snprintf(mem, sizeof(mem), "%llu", mem_bytes);
    r->pid = fork();
    if (r->pid < 0) {
        return -1;
    }
    if (r->pid == 0) {
        execlp("redis-server", "redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "",
               "--appendonly", "no", "--dir", r->dir, "--maxmemory", mem, "--protected-mode", "yes",
               "--loglevel", "warning", (char *)NULL);
        fprintf(stderr, "redis peer: cannot run redis-server (install the Debian package "
                        "redis-server)\n");
        _exit(127);
    }
    for (int i = 0; i < 200; i++) {
        redisContext *c = bench_redis_connect(r);
        int status;

        if (c != NULL) {
            redisReply *rep = redisCommand(c, "PING");
            int ok = rep != NULL && rep->type == REDIS_REPLY_STATUS;

            freeReplyObject(rep);
            redisFree(c);
            if (ok) {
                return 0;
            }
        }
        if (waitpid(r->pid, &status, WNOHANG) == r->pid) {
            r->pid = 0;
            return -1;
        }
        nanosleep(&(struct timespec){0, 20 * 1000 * 1000}, NULL);
    }
    bench_redis_stop(r);
    return -1;
}

redisContext *bench_redis_connect(const bench_redis_t *r)
{
    redisContext *c = redisConnect("127.0.0.1", r->port);

    if (c == NULL || c->err) {
        if (c != NULL) {
            redisFree(c);
        }
        return NULL;
    }
    return c;
}

void bench_redis_stop(bench_redis_t *r)
{
    char cmd[128];

    if (r->pid > 0) {
        kill(r->pid, SIGTERM);
        waitpid(r->pid, NULL, 0);
        r->pid = 0;
    }
    if (r->dir[0] != '\0') {
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", r->dir);
        if (system(cmd) != 0) {
            fprintf(stderr, "redis peer: could not remove %s\n", r->dir);
        }
        r->dir[0] = '\0';
    }
}
