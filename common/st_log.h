/*
 * st_log.h - logging: levels, one line per event, key=value pairs.
 *
 * A line looks like
 *   2026-11-29T08:10:00.123Z WARN  stratad[4242] lookup refused hashes=20000 limit=16384
 * The message is a short phrase; the context follows as key=value pairs,
 * written by the caller in the format string. Secrets never go into a log line.
 *
 * Repeated warnings are rate-limited per call site with st_log_ratelimited():
 * at most ST_LOG_BURST lines per ST_LOG_INTERVAL_MS, and the first line after a
 * quiet spell carries suppressed=N for the lines that were dropped.
 *
 * Thread safety: every function may be called from any thread; a line is
 * written with one write so lines of different threads do not interleave.
 */
#ifndef STRATA_ST_LOG_H
#define STRATA_ST_LOG_H

#include <stdint.h>
#include <stdio.h>
#include <pthread.h>

#include "strata/status.h"

typedef enum st_log_level {
    ST_LOG_ERROR = 0,
    ST_LOG_WARN = 1,
    ST_LOG_INFO = 2,
    ST_LOG_DEBUG = 3,
    ST_LOG_TRACE = 4
} st_log_level_t;

#define ST_LOG_BURST       5
#define ST_LOG_INTERVAL_MS 10000

/* Per-call-site state of a rate-limited log line. Zero-initialised. */
typedef struct st_log_ratelimit {
    pthread_mutex_t lock;
    uint64_t window_start_ms;
    uint32_t in_window;
    uint64_t suppressed;
} st_log_ratelimit_t;

#define ST_LOG_RATELIMIT_INIT              \
    {                                      \
        PTHREAD_MUTEX_INITIALIZER, 0, 0, 0 \
    }

extern int st_log_level_current;

/* Sets the process name shown in every line (default "strata"). */
void st_log_set_ident(const char *ident);

/* Sets the lowest level that is written. */
void st_log_set_level(st_log_level_t level);

/*
 * Parses "error", "warn", "info", "debug" or "trace" into *level_p.
 * Returns ST_OK, or ST_ERR_INVALID for any other text (*level_p untouched).
 */
st_status_t st_log_parse_level(const char *text, st_log_level_t *level_p);

/* Returns the name of level ("warn"). */
const char *st_log_level_name(st_log_level_t level);

/*
 * Sends log lines to fd instead of stderr (for tests). Returns the old fd.
 */
int st_log_set_fd(int fd);

/* Writes one line. Use the macros below rather than calling this. */
void st_log_write(st_log_level_t level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/*
 * Returns 1 if a line may be written at this call site now, 0 if it must be
 * dropped; on 1, *suppressed_p is the number dropped since the last line.
 */
int st_log_ratelimit_check(st_log_ratelimit_t *rl, uint64_t *suppressed_p);

/* Monotonic clock in milliseconds. */
uint64_t st_log_now_ms(void);

#define st_log(level, ...)                          \
    do {                                            \
        if ((int)(level) <= st_log_level_current) { \
            st_log_write((level), __VA_ARGS__);     \
        }                                           \
    } while (0)

#define st_error(...) st_log(ST_LOG_ERROR, __VA_ARGS__)
#define st_warn(...)  st_log(ST_LOG_WARN, __VA_ARGS__)
#define st_info(...)  st_log(ST_LOG_INFO, __VA_ARGS__)
#define st_debug(...) st_log(ST_LOG_DEBUG, __VA_ARGS__)
#define st_trace(...) st_log(ST_LOG_TRACE, __VA_ARGS__)

/*
 * st_log_ratelimited(level, fmt, ...): like st_log(), limited per call site.
 * fmt must be a string literal; " suppressed=N" is appended when lines were
 * dropped before this one.
 */
#define st_log_ratelimited(level, fmt, ...)                                                      \
    do {                                                                                         \
        static st_log_ratelimit_t st_rl_ = ST_LOG_RATELIMIT_INIT;                                \
        uint64_t st_sup_;                                                                        \
        if ((int)(level) <= st_log_level_current && st_log_ratelimit_check(&st_rl_, &st_sup_)) { \
            if (st_sup_ != 0) {                                                                  \
                st_log_write((level), fmt " suppressed=%llu", ##__VA_ARGS__,                     \
                             (unsigned long long)st_sup_);                                       \
            } else {                                                                             \
                st_log_write((level), fmt, ##__VA_ARGS__);                                       \
            }                                                                                    \
        }                                                                                        \
    } while (0)

#define st_warn_ratelimited(fmt, ...) st_log_ratelimited(ST_LOG_WARN, fmt, ##__VA_ARGS__)

#endif /* STRATA_ST_LOG_H */
