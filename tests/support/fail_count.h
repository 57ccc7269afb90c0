/*
 * fail_count.h - CHECK for the tests that run without cmocka (the GPU ones):
 * a false condition prints where it failed and counts one more in the
 * including file's `failures`, and the test goes on; main returns by it.
 */
#ifndef STRATA_TEST_FAIL_COUNT_H
#define STRATA_TEST_FAIL_COUNT_H

#include <stdio.h>

#define CHECK(cond, ...)                                \
    do {                                                \
        if (!(cond)) {                                  \
            printf("FAIL %s:%d: ", __FILE__, __LINE__); \
            printf(__VA_ARGS__);                        \
            printf("\n");                               \
            failures++;                                 \
        }                                               \
    } while (0)

#endif
