/*
 * data_dirs.h - removing the SSD tiers' directories the integration tests
 * give their daemons (--data-dir): made, one a node, under a fresh folder;
 * removed, the LMDB files in each, then the folder.
 */
#ifndef STRATA_TEST_DATA_DIRS_H
#define STRATA_TEST_DATA_DIRS_H

#include <stddef.h>

/* Removes dir/data.mdb, dir/lock.mdb, then dir (what is missing is skipped). */
void dd_rm_dir(const char *dir);

/* dd_rm_dir of dir/0 .. dir/(n-1), one a node, then removes dir. */
void dd_rm_node_dirs(const char *dir, int n);

/* Makes a fresh folder from tmpl (mkdtemp: ends in XXXXXX) into dir (cap
 * bytes), and dir/0 .. dir/(n-1) in it. Returns 0, or -1 when one cannot be made. */
int dd_mk_node_dirs(char *dir, size_t cap, const char *tmpl, int n);

#endif
