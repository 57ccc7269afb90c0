/* data_dirs.c - see data_dirs.h. */
#include "data_dirs.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

void dd_rm_dir(const char *dir)
{
    char p[512];

    snprintf(p, sizeof(p), "%s/data.mdb", dir);
    unlink(p);
    snprintf(p, sizeof(p), "%s/lock.mdb", dir);
    unlink(p);
    rmdir(dir);
}

void dd_rm_node_dirs(const char *dir, int n)
{
    char p[256]; /* dir/i: shorter than dd_rm_dir's paths */

    for (int i = 0; i < n; i++) {
        snprintf(p, sizeof(p), "%s/%d", dir, i);
        dd_rm_dir(p);
    }
    rmdir(dir);
}

int dd_mk_node_dirs(char *dir, size_t cap, const char *tmpl, int n)
{
    char p[256];

    snprintf(dir, cap, "%s", tmpl);
    if (mkdtemp(dir) == NULL) {
        return -1;
    }
    for (int i = 0; i < n; i++) {
        snprintf(p, sizeof(p), "%s/%d", dir, i);
        if (mkdir(p, 0700) != 0) {
            return -1;
        }
    }
    return 0;
}
