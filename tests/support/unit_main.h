/*
 * unit_main.h - the main of a cmocka test file that runs one group of tests
 * with no group set-up or tear-down:
 *
 *     int main(void)
 *     {
 *         UNIT_RUN(cmocka_unit_test(test_a), cmocka_unit_test(test_b));
 *     }
 *
 * stands for the table `const struct CMUnitTest tests[] = {...}` and
 * `return cmocka_run_group_tests(tests, NULL, NULL)`; the group keeps cmocka's
 * name "tests". Work to do before the group (seeding, say) goes above it.
 *
 * UNIT_FIXTURE(test_a) is test_a run between the file's own setup() and
 * teardown(), for files whose tests share one fixture under those names.
 */
#ifndef STRATA_TESTS_UNIT_MAIN_H
#define STRATA_TESTS_UNIT_MAIN_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#define UNIT_RUN(...)                                     \
    do {                                                  \
        const struct CMUnitTest tests[] = {__VA_ARGS__};  \
        return cmocka_run_group_tests(tests, NULL, NULL); \
    } while (0)

#define UNIT_FIXTURE(test) cmocka_unit_test_setup_teardown(test, setup, teardown)

#endif
