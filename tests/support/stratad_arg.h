/*
 * stratad_arg.h - the argument every integration test's main takes first:
 * the path of the stratad binary (ctest passes $<TARGET_FILE:stratad>).
 */
#ifndef STRATA_TEST_STRATAD_ARG_H
#define STRATA_TEST_STRATAD_ARG_H

/*
 * Stores argv[1] in *stratad and returns 0 when argc is at least min_argc;
 * otherwise prints "usage: PROG ARGS" on stderr (PROG: prog, or argv[0] when
 * prog is NULL) and returns 2, the exit status of a test called wrongly.
 */
int tm_stratad_arg(int argc, char **argv, int min_argc, const char *prog, const char *args,
                   const char **stratad);

/*
 * The whole main of a test file that takes nothing but the stratad path
 * (usage "PROG ARGS"): its cmocka cases (the variable arguments:
 * cmocka_unit_test(...), ...) run as one group with the group's set-up and
 * tear-down (NULL: none).
 */
#define TM_STRATAD_GROUP_MAIN(prog, args, stratad, setup, teardown, ...)     \
    int main(int argc, char **argv)                                          \
    {                                                                        \
        const struct CMUnitTest tests[] = {__VA_ARGS__};                     \
                                                                             \
        if (tm_stratad_arg(argc, argv, 2, (prog), (args), (stratad)) != 0) { \
            return 2;                                                        \
        }                                                                    \
        return cmocka_run_group_tests(tests, (setup), (teardown));           \
    }

/* A group tear-down that removes the file the group's state names (a
 * set-up sets *state to the path of a file of the tests'). */
int tm_group_unlink(void **state);

/* TM_STRATAD_GROUP_MAIN without a group set-up or tear-down. */
#define TM_STRATAD_MAIN(prog, args, stratad, ...) \
    TM_STRATAD_GROUP_MAIN(prog, args, stratad, NULL, NULL, __VA_ARGS__)

/*
 * tm_stratad_arg, then argv[2], where given, as cmocka's test filter (ctest
 * runs the cases of one file in groups); 0, or 2 as tm_stratad_arg.
 */
#define TM_STRATAD_FILTER_ARG(argc, argv, prog, args, stratad)             \
    (tm_stratad_arg((argc), (argv), 2, (prog), (args), (stratad)) != 0 ? 2 \
     : (argc) > 2 ? (cmocka_set_test_filter((argv)[2]), 0)                 \
                  : 0)

#endif
