/*
 * procstat.c - resident memory, open descriptors and threads of this
 * process, from /proc/self; see procstat.h.
 */
#include "procstat.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Reads the start of a /proc file into buf (NUL-terminated); -1 on error. */
static ssize_t cm_proc_read(const char *path, char *buf, size_t size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n;

    if (fd < 0) {
        return -1;
    }
    n = read(fd, buf, size - 1);
    close(fd);
    if (n >= 0) {
        buf[n] = '\0';
    }
    return n;
}

/* Resident pages (the second field of statm) times the page size. */
static int cm_proc_rss(uint64_t *bytes_p)
{
    char buf[256], *end;
    unsigned long long resident;
    long page = sysconf(_SC_PAGESIZE);

    if (cm_proc_read("/proc/self/statm", buf, sizeof(buf)) <= 0 || page <= 0) {
        return -1;
    }
    (void)strtoull(buf, &end, 10); /* size, then resident */
    resident = strtoull(end, NULL, 10);
    *bytes_p = (uint64_t)resident * (uint64_t)page;
    return 0;
}

/* The Threads: line of /proc/self/status. */
static int cm_proc_threads(uint64_t *threads_p)
{
    char buf[4096];
    const char *line;

    if (cm_proc_read("/proc/self/status", buf, sizeof(buf)) <= 0 ||
        (line = strstr(buf, "\nThreads:")) == NULL) {
        return -1;
    }
    *threads_p = strtoull(line + strlen("\nThreads:"), NULL, 10);
    return 0;
}

/* Entries of /proc/self/fd but ".", ".." and the directory's own descriptor. */
static int cm_proc_fds(uint64_t *fds_p)
{
    DIR *dir = opendir("/proc/self/fd");
    struct dirent *de;
    uint64_t n = 0;
    int own;

    if (dir == NULL) {
        return -1;
    }
    own = dirfd(dir);
    while ((de = readdir(dir)) != NULL) {
        if (de->d_name[0] != '.' && atoi(de->d_name) != own) {
            n++;
        }
    }
    closedir(dir);
    *fds_p = n;
    return 0;
}

st_status_t cm_proc_sample(cm_proc_t *out)
{
    int bad = 0;

    memset(out, 0, sizeof(*out));
    bad |= cm_proc_rss(&out->ps_rss_bytes);
    bad |= cm_proc_threads(&out->ps_threads);
    bad |= cm_proc_fds(&out->ps_open_fds);
    return bad ? ST_ERR_IO : ST_OK;
}
