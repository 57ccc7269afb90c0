/*
 * log.c - one line per event, key=value context, per-site rate limiting.
 */
#include "st_log.h"

#include <stdarg.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

int st_log_level_current = ST_LOG_INFO;

static char st_log_ident[32] = "strata";
static int st_log_fd = STDERR_FILENO;

static const char *const st_log_names[] = {"error", "warn", "info", "debug", "trace"};
static const char *const st_log_tags[] = {"ERROR", "WARN ", "INFO ", "DEBUG", "TRACE"};

void st_log_set_ident(const char *ident)
{
    snprintf(st_log_ident, sizeof(st_log_ident), "%s", ident);
}

void st_log_set_level(st_log_level_t level)
{
    st_log_level_current = (int)level;
}

int st_log_set_fd(int fd)
{
    int old = st_log_fd;

    st_log_fd = fd;
    return old;
}

const char *st_log_level_name(st_log_level_t level)
{
    if ((int)level < 0 || (int)level > ST_LOG_TRACE) {
        return "unknown";
    }
    return st_log_names[level];
}

st_status_t st_log_parse_level(const char *text, st_log_level_t *level_p)
{
    for (int i = 0; i <= ST_LOG_TRACE; i++) {
        if (strcasecmp(text, st_log_names[i]) == 0) {
            *level_p = (st_log_level_t)i;
            return ST_OK;
        }
    }
    if (strcasecmp(text, "warning") == 0) {
        *level_p = ST_LOG_WARN;
        return ST_OK;
    }
    return ST_ERR_INVALID;
}

uint64_t st_log_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void st_log_write(st_log_level_t level, const char *fmt, ...)
{
    char line[1024];
    struct timespec ts;
    struct tm tm;
    size_t len;
    int n;
    va_list ap;

    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    n = snprintf(line, sizeof(line), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %s %s[%d] ",
                 tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                 ts.tv_nsec / 1000000L,
                 st_log_tags[(int)level <= ST_LOG_TRACE ? (int)level : ST_LOG_TRACE], st_log_ident,
                 (int)getpid());
    len = n > 0 ? (size_t)n : 0;

    va_start(ap, fmt);
    n = vsnprintf(line + len, sizeof(line) - len - 1, fmt, ap);
    va_end(ap);
    if (n > 0) {
        len += (size_t)n;
    }
    if (len > sizeof(line) - 2) {
        /* Truncated: mark it so nobody mistakes the cut line for the whole. */
        len = sizeof(line) - 2;
        memcpy(line + len - 3, "...", 3);
    }
    /* Keep one event on one line. */
    for (size_t i = 0; i < len; i++) {
        if (line[i] == '\n') {
            line[i] = ' ';
        }
    }
    line[len++] = '\n';
    if (write(st_log_fd, line, len) < 0) {
        /* Nowhere left to report it. */
    }
}

int st_log_ratelimit_check(st_log_ratelimit_t *rl, uint64_t *suppressed_p)
{
    uint64_t now = st_log_now_ms();
    int allow;

    pthread_mutex_lock(&rl->lock);
    if (rl->window_start_ms == 0 || now - rl->window_start_ms >= ST_LOG_INTERVAL_MS) {
        rl->window_start_ms = now;
        rl->in_window = 0;
    }
    allow = rl->in_window < ST_LOG_BURST;
    if (allow) {
        rl->in_window++;
        *suppressed_p = rl->suppressed;
        rl->suppressed = 0;
    } else {
        rl->suppressed++;
    }
    pthread_mutex_unlock(&rl->lock);
    return allow;
}
