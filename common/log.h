/*
 * log.h - logging: levels, one line per event, key=value pairs.
 *
 * A line looks like
 *   2026-11-29T08:10:00.123Z WARN  stratad[4242] lookup refused hashes=20000 limit=16384
 * The message is a short phrase; the context follows as key=value pairs,
 * written by the caller in the format string. Secrets never go into a log line.
 *
 * Repeated warnings are rate-limited per call site with lg_ratelimited():
 * at most LG_BURST lines per LG_INTERVAL_MS, and the first line after a
 * quiet spell carries suppressed=N for the lines that were dropped.
 *
 * Thread safety: every function may be called from any thread; a line is
 * written with one write so lines of different threads do not interleave.
 */
#ifndef STRATA_LOG_H
#define STRATA_LOG_H

#include <stdint.h>
#include <stdio.h>
#include <pthread.h>

#include "strata/status.h"

typedef enum lg_level {
    LG_ERROR = 0,
    LG_WARN = 1,
    LG_INFO = 2,
    LG_DEBUG = 3,
    LG_TRACE = 4
} lg_level_t;

#define LG_BURST       5
#define LG_INTERVAL_MS 10000

/* Per-call-site state of a rate-limited log line. Zero-initialised. */
typedef struct lg_ratelimit {
    pthread_mutex_t lock;
    uint64_t window_start_ms;
    uint32_t in_window;
    uint64_t suppressed;
} lg_ratelimit_t;

#define LG_RATELIMIT_INIT                  \
    {                                      \
        PTHREAD_MUTEX_INITIALIZER, 0, 0, 0 \
    }

extern int lg_level_current;

/* Sets the process name shown in every line (default "strata"). */
void lg_set_ident(const char *ident);

/* Sets the lowest level that is written. */
void lg_set_level(lg_level_t level);

/*
 * Parses "error", "warn", "info", "debug" or "trace" into *level_p.
 * Returns ST_OK, or ST_ERR_INVALID for any other text (*level_p untouched).
 */
st_status_t lg_parse_level(const char *text, lg_level_t *level_p);

/* Returns the name of level ("warn"). */
const char *lg_level_name(lg_level_t level);

/* The names of the levels in lg_level_t order, NULL-terminated (a config table's
 * enum_names for a log_level option). */
extern const char *const lg_level_names[];

/*
 * Sends log lines to fd instead of stderr (for tests). Returns the old fd.
 */
int lg_set_fd(int fd);

/* Writes one line. Use the macros below rather than calling this. */
void lg_write(lg_level_t level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/*
 * Returns 1 if a line may be written at this call site now, 0 if it must be
 * dropped; on 1, *suppressed_p is the number dropped since the last line.
 */
int lg_ratelimit_check(lg_ratelimit_t *rl, uint64_t *suppressed_p);

/* Monotonic clock in milliseconds. */
uint64_t lg_now_ms(void);

#define lg_log(level, ...)                      \
    do {                                        \
        if ((int)(level) <= lg_level_current) { \
            lg_write((level), __VA_ARGS__);     \
        }                                       \
    } while (0)

#define lg_error(...) lg_log(LG_ERROR, __VA_ARGS__)
#define lg_warn(...)  lg_log(LG_WARN, __VA_ARGS__)
#define lg_info(...)  lg_log(LG_INFO, __VA_ARGS__)
#define lg_debug(...) lg_log(LG_DEBUG, __VA_ARGS__)
#define lg_trace(...) lg_log(LG_TRACE, __VA_ARGS__)

/*
 * lg_ratelimited(level, fmt, ...): like lg_log(), limited per call site.
 * fmt must be a string literal; " suppressed=N" is appended when lines were
 * dropped before this one.
 */
#define lg_ratelimited(level, fmt, ...)                                                  \
    do {                                                                                 \
        static lg_ratelimit_t lg_rl_ = LG_RATELIMIT_INIT;                                \
        uint64_t lg_sup_;                                                                \
        if ((int)(level) <= lg_level_current && lg_ratelimit_check(&lg_rl_, &lg_sup_)) { \
            if (lg_sup_ != 0) {                                                          \
                lg_write((level), fmt " suppressed=%llu", ##__VA_ARGS__,                 \
                         (unsigned long long)lg_sup_);                                   \
            } else {                                                                     \
                lg_write((level), fmt, ##__VA_ARGS__);                                   \
            }                                                                            \
        }                                                                                \
    } while (0)

#define lg_warn_ratelimited(fmt, ...) lg_ratelimited(LG_WARN, fmt, ##__VA_ARGS__)

#endif /* STRATA_LOG_H */
