/*
 * test_ssd.h - what the files of test_ssd share: the helpers over a
 * temporary LMDB environment (test_ssd.c) and the cases test_ssd_env.c
 * holds (main, in test_ssd.c, lists them).
 */
#ifndef STRATA_TEST_SSD_H
#define STRATA_TEST_SSD_H

#include <stddef.h>
#include <stdint.h>

#include "log.h"
#include "ssd.h"

/* Helpers (test_ssd.c): a temporary directory, an environment in it,
 * deterministic values and keys, checked reads, durable puts, spills. */
char *make_dir(void);
void remove_dir(char *dir);
ssd_t *open_env(const char *dir, uint64_t map_size, uint64_t budget);
void fill(uint8_t *buf, size_t len, uint64_t seed);
ssd_key_t mkkey(uint64_t ns, uint64_t n, unsigned kind, uint16_t layer);
void check_value(ssd_t *ssd, const ssd_key_t *key, size_t len, uint64_t seed);
void put_durable(ssd_t *ssd, const ssd_key_t *key, size_t len, uint64_t seed);
void spill_copy(ssd_t *ssd, const ssd_key_t *key, size_t len, uint64_t seed);
/* count_done counts completions into done_ok and done_other. */
extern int done_ok, done_other;
void count_done(void *arg, const ssd_key_t *key, st_status_t status);

/* The cases of test_ssd_env.c; hold_reader_main is the child of
 * test_stale_reader (test_ssd --hold-reader DIR). */
void test_map_full(void **state);
void test_reopen(void **state);
void test_async_batching(void **state);
void test_iterate(void **state);
void test_invalid(void **state);
void test_disk_full(void **state);
int hold_reader_main(const char *dir);
void test_stale_reader(void **state);
void test_fork_guard(void **state);
void test_concurrent(void **state);

#endif
