/*
 * peer_redis.h - a real Redis server as the peer in a benchmark: started on a
 * free loopback port with persistence off, driven through hiredis, stopped at
 * the end of the run.
 */
#ifndef STRATA_BENCH_PEER_REDIS_H
#define STRATA_BENCH_PEER_REDIS_H

#include <hiredis/hiredis.h>
#include <sys/types.h>

typedef struct bench_redis {
    pid_t pid;
    int port;
    char dir[64];
} bench_redis_t;

/*
 * Starts redis-server on 127.0.0.1 at a free port with maxmemory mem_bytes
 * (0: no limit). Returns 0, or -1 with a message on stderr (for example when
 * redis-server is not installed: the benchmark then reports the peer as
 * missing).
 */
int bench_redis_start(bench_redis_t *r, unsigned long long mem_bytes);

/* Connects a new hiredis context to the server. NULL on failure. */
redisContext *bench_redis_connect(const bench_redis_t *r);

/* Stops the server and removes its directory. */
void bench_redis_stop(bench_redis_t *r);

#endif
