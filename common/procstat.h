/*
 * procstat.h - what the kernel says this process holds: resident memory,
 * open descriptors and threads, read from /proc/self. The daemon reports
 * them in Stats and on /metrics so that a soak can show them flat
 * (docs/observability.md, docs/testing.md "Soak").
 *
 * Linux only (/proc). Any thread may call cm_proc_sample at any time; it
 * takes no lock and opens two descriptors for the time of the call.
 */
#ifndef STRATA_PROCSTAT_H
#define STRATA_PROCSTAT_H

#include <stdint.h>

#include "strata/status.h"

typedef struct cm_proc {
    uint64_t ps_rss_bytes; /* resident set: pages in RAM x page size (/proc/self/statm) */
    uint64_t ps_open_fds;  /* entries of /proc/self/fd, the descriptor reading them excluded */
    uint64_t ps_threads;   /* Threads: of /proc/self/status */
} cm_proc_t;

/*
 * Samples this process into *out (all three fields; a field whose source
 * could not be read is 0).
 *
 * @return ST_OK when all three were read; ST_ERR_IO when one of them could
 *         not be (no /proc, a descriptor limit reached): the others are
 *         still filled in.
 */
st_status_t cm_proc_sample(cm_proc_t *out);

#endif
