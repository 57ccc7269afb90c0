/*
 * clock.h - the clocks: monotonic time for durations and timeouts, real
 * (wall-clock) time for timestamps, and absolute CLOCK_REALTIME deadlines
 * for pthread_cond_timedwait.
 *
 * Header-only: any module may include it without linking strata_common.
 * Every function may be called from any thread; none fails (clock_gettime
 * of these two clocks cannot fail on Linux).
 */
#ifndef STRATA_CLOCK_H
#define STRATA_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t cm_clock_ns(clockid_t clock)
{
    struct timespec ts;

    clock_gettime(clock, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Monotonic time in nanoseconds, microseconds and milliseconds. */
static inline uint64_t cm_mono_ns(void)
{
    return cm_clock_ns(CLOCK_MONOTONIC);
}

static inline uint64_t cm_mono_us(void)
{
    return cm_clock_ns(CLOCK_MONOTONIC) / 1000u;
}

static inline uint64_t cm_mono_ms(void)
{
    return cm_clock_ns(CLOCK_MONOTONIC) / 1000000u;
}

/* Wall-clock time since the Unix epoch in microseconds and milliseconds. */
static inline uint64_t cm_real_us(void)
{
    return cm_clock_ns(CLOCK_REALTIME) / 1000u;
}

static inline uint64_t cm_real_ms(void)
{
    return cm_clock_ns(CLOCK_REALTIME) / 1000000u;
}

/* The CLOCK_REALTIME instant us microseconds from now, for pthread_cond_timedwait. */
static inline struct timespec cm_deadline_us(uint64_t us)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += (time_t)(us / 1000000u);
    ts.tv_nsec += (long)(us % 1000000u) * 1000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

/* The CLOCK_REALTIME instant ms milliseconds from now. */
static inline struct timespec cm_deadline_ms(uint64_t ms)
{
    return cm_deadline_us(ms * 1000u);
}

#endif
