/*
 * log.c - one line per event, key=value context, per-site rate limiting.
 */
#include "clock.h"
#include "log.h"

#include <stdarg.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

int lg_level_current = LG_INFO;

static char lg_ident[32] = "strata";
static int lg_fd = STDERR_FILENO;

const char *const lg_level_names[] = {"error", "warn", "info", "debug", "trace", NULL};
static const char *const lg_tags[] = {"ERROR", "WARN ", "INFO ", "DEBUG", "TRACE"};

void lg_set_ident(const char *ident)
{
    snprintf(lg_ident, sizeof(lg_ident), "%s", ident);
}

void lg_set_level(lg_level_t level)
{
    lg_level_current = (int)level;
}

int lg_set_fd(int fd)
{
    int old = lg_fd;

    lg_fd = fd;
    return old;
}

const char *lg_level_name(lg_level_t level)
{
    if ((int)level < 0 || (int)level > LG_TRACE) {
        return "unknown";
    }
    return lg_level_names[level];
}

st_status_t lg_parse_level(const char *text, lg_level_t *level_p)
{
    for (int i = 0; i <= LG_TRACE; i++) {
        if (strcasecmp(text, lg_level_names[i]) == 0) {
            *level_p = (lg_level_t)i;
            return ST_OK;
        }
    }
    if (strcasecmp(text, "warning") == 0) {
        *level_p = LG_WARN;
        return ST_OK;
    }
    return ST_ERR_INVALID;
}

uint64_t lg_now_ms(void)
{
    return cm_mono_ms();
}

void lg_write(lg_level_t level, const char *fmt, ...)
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
                 ts.tv_nsec / 1000000L, lg_tags[(int)level <= LG_TRACE ? (int)level : LG_TRACE],
                 lg_ident, (int)getpid());
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
    if (write(lg_fd, line, len) < 0) {
        /* Nowhere left to report it. */
    }
}

int lg_ratelimit_check(lg_ratelimit_t *rl, uint64_t *suppressed_p)
{
    uint64_t now = lg_now_ms();
    int allow;

    pthread_mutex_lock(&rl->lock);
    if (rl->window_start_ms == 0 || now - rl->window_start_ms >= LG_INTERVAL_MS) {
        rl->window_start_ms = now;
        rl->in_window = 0;
    }
    allow = rl->in_window < LG_BURST;
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
