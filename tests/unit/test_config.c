/* test_config.c - the config table: defaults, file, flags and every error. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "st_config.h"

struct conf {
    char *listen;
    uint64_t memory_limit;
    uint64_t lease;
    int64_t workers;
    int verbose;
    int mode;
    char *token;
};

static const char *const modes[] = {"ucx", "libfabric", NULL};

#define OFF(m) offsetof(struct conf, m)
static const st_cfg_option_t options[] = {
    {"listen", ST_CFG_STRING, OFF(listen), "127.0.0.1:7000", 0, 0, 0, NULL, 'l',
     "address to listen on"},
    {"memory_limit", ST_CFG_SIZE, OFF(memory_limit), "1G", 64ll << 20, 1ll << 40, 0, NULL, 0,
     "memory limit"},
    {"lease", ST_CFG_DURATION, OFF(lease), "5s", 10, 600000, 0, NULL, 0, "lease time"},
    {"workers", ST_CFG_INT, OFF(workers), "2", 1, 64, 0, NULL, 'w', "worker threads"},
    {"verbose", ST_CFG_BOOL, OFF(verbose), "false", 0, 0, 0, NULL, 'v', "chatty"},
    {"transport", ST_CFG_ENUM, OFF(mode), "ucx", 0, 0, 0, modes, 0, "data plane"},
    {"token", ST_CFG_STRING, OFF(token), "", 0, 0, ST_CFG_SENSITIVE, NULL, 0, "secret"},
};
static const st_cfg_table_t table = {"testd", "a test daemon", NULL, options,
                                     sizeof(options) / sizeof(options[0])};

static char tmpfile_path[64];

static const char *write_file(const char *text)
{
    int fd;

    snprintf(tmpfile_path, sizeof(tmpfile_path), "/tmp/st_test_cfg_XXXXXX");
    fd = mkstemp(tmpfile_path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    return tmpfile_path;
}

static void test_defaults(void **state)
{
    struct conf c = {0};

    assert_int_equal(st_config_defaults(&table, &c), ST_OK);
    assert_string_equal(c.listen, "127.0.0.1:7000");
    assert_int_equal(c.memory_limit, 1ull << 30);
    assert_int_equal(c.lease, 5000);
    assert_int_equal(c.workers, 2);
    assert_int_equal(c.verbose, 0);
    assert_int_equal(c.mode, 0);
    st_config_free(&table, &c);
}

static void test_file_then_flags(void **state)
{
    struct conf c = {0};
    char err[256] = "";
    int npos, help;
    const char *path = write_file("# comment\nmemory_limit = 2G\n[testd]\nworkers = 8\n"
                                  "transport = libfabric\nlisten = \"0.0.0.0:9\"\n");
    char *argv[] = {"testd",   "--workers=4", "pos1", "-c",           (char *)path, "--verbose",
                    "--lease", "250ms",       "--",   "--not-a-flag", NULL};

    assert_int_equal(st_config_defaults(&table, &c), ST_OK);
    assert_int_equal(st_config_parse_args(&table, &c, 10, argv, &npos, &help, err, sizeof(err)),
                     ST_OK);
    assert_int_equal(help, 0);
    assert_int_equal(c.memory_limit, 2ull << 30);
    assert_int_equal(c.workers, 4); /* the flag wins over the file */
    assert_int_equal(c.mode, 1);
    assert_int_equal(c.verbose, 1);
    assert_int_equal(c.lease, 250);
    assert_string_equal(c.listen, "0.0.0.0:9");
    assert_int_equal(npos, 2);
    assert_string_equal(argv[1], "pos1");
    assert_string_equal(argv[2], "--not-a-flag");
    unlink(path);
    st_config_free(&table, &c);
}

static void test_unknown_key_names_file_and_line(void **state)
{
    struct conf c = {0};
    char err[256] = "";
    const char *path = write_file("workers = 3\n\nmemroy_limit = 2G\n");

    st_config_defaults(&table, &c);
    assert_int_equal(st_config_load_file(&table, &c, path, err, sizeof(err)), ST_ERR_NOT_FOUND);
    assert_non_null(strstr(err, "unknown key 'memroy_limit'"));
    assert_non_null(strstr(err, path));
    assert_non_null(strstr(err, ":3:"));
    unlink(path);
    st_config_free(&table, &c);
}

static void test_unknown_section(void **state)
{
    struct conf c = {0};
    char err[256] = "";
    const char *path = write_file("[other]\nworkers = 3\n");

    st_config_defaults(&table, &c);
    assert_int_equal(st_config_load_file(&table, &c, path, err, sizeof(err)), ST_ERR_NOT_FOUND);
    assert_non_null(strstr(err, "unknown section '[other]'"));
    unlink(path);
    st_config_free(&table, &c);
}

static void test_bad_values(void **state)
{
    struct conf c = {0};
    char err[256] = "";

    st_config_defaults(&table, &c);
    assert_int_equal(st_config_set(&table, &c, "workers", "many", "x.ini:2", err, sizeof(err)),
                     ST_ERR_INVALID);
    assert_non_null(strstr(err, "x.ini:2: value 'many' for 'workers' is not an integer"));
    assert_int_equal(c.workers, 2); /* unchanged */

    assert_int_equal(st_config_set(&table, &c, "memory_limit", "12Q", "x", err, sizeof(err)),
                     ST_ERR_INVALID);
    assert_non_null(strstr(err, "is not a size"));
    assert_int_equal(st_config_set(&table, &c, "verbose", "maybe", "x", err, sizeof(err)),
                     ST_ERR_INVALID);
    assert_non_null(strstr(err, "boolean"));
    assert_int_equal(st_config_set(&table, &c, "transport", "tcp", "x", err, sizeof(err)),
                     ST_ERR_INVALID);
    assert_non_null(strstr(err, "ucx, libfabric"));
    assert_int_equal(st_config_set(&table, &c, "lease", "5 fortnights", "x", err, sizeof(err)),
                     ST_ERR_INVALID);
    st_config_free(&table, &c);
}

static void test_out_of_range_names_bounds(void **state)
{
    struct conf c = {0};
    char err[256] = "";

    st_config_defaults(&table, &c);
    assert_int_equal(
        st_config_set(&table, &c, "memory_limit", "1M", "--memory-limit", err, sizeof(err)),
        ST_ERR_INVALID);
    assert_non_null(strstr(err, "memory_limit = 1M is out of range [64M, 1T]"));
    assert_int_equal(c.memory_limit, 1ull << 30);
    assert_int_equal(st_config_set(&table, &c, "workers", "65", "f:1", err, sizeof(err)),
                     ST_ERR_INVALID);
    assert_non_null(strstr(err, "[1, 64]"));
    assert_int_equal(st_config_set(&table, &c, "lease", "11m", "f:1", err, sizeof(err)),
                     ST_ERR_INVALID);
    assert_non_null(strstr(err, "[10ms, 10m]"));
    st_config_free(&table, &c);
}

static void test_missing_file(void **state)
{
    struct conf c = {0};
    char err[256] = "";
    int npos, help;
    char *argv[] = {"testd", "--config", "/nonexistent/strata.ini", NULL};

    st_config_defaults(&table, &c);
    assert_int_equal(st_config_parse_args(&table, &c, 3, argv, &npos, &help, err, sizeof(err)),
                     ST_ERR_IO);
    assert_non_null(strstr(err, "cannot open config file '/nonexistent/strata.ini'"));
    assert_non_null(strstr(err, "No such file"));
    st_config_free(&table, &c);
}

static void test_flag_errors_and_help(void **state)
{
    struct conf c = {0};
    char err[256] = "";
    int npos, help;
    char *argv1[] = {"testd", "--frobnicate", NULL};
    char *argv2[] = {"testd", "--workers", NULL};
    char *argv3[] = {"testd", "--workers", "0", "--help", NULL};
    char *argv4[] = {"testd", "--no-verbose", "-w", "7", NULL};

    st_config_defaults(&table, &c);
    assert_int_equal(st_config_parse_args(&table, &c, 2, argv1, &npos, &help, err, sizeof(err)),
                     ST_ERR_NOT_FOUND);
    assert_non_null(strstr(err, "unknown flag '--frobnicate'"));
    assert_int_equal(st_config_parse_args(&table, &c, 2, argv2, &npos, &help, err, sizeof(err)),
                     ST_ERR_INVALID);
    assert_non_null(strstr(err, "missing value"));
    assert_int_equal(st_config_parse_args(&table, &c, 4, argv3, &npos, &help, err, sizeof(err)),
                     ST_OK);
    assert_int_equal(help, 1);
    assert_int_equal(st_config_parse_args(&table, &c, 4, argv4, &npos, &help, err, sizeof(err)),
                     ST_OK);
    assert_int_equal(c.verbose, 0);
    assert_int_equal(c.workers, 7);
    st_config_free(&table, &c);
}

static void test_usage_and_markdown_come_from_the_table(void **state)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);

    st_config_usage(&table, f);
    st_config_markdown(&table, f);
    fclose(f);
    for (size_t i = 0; i < table.n_options; i++) {
        assert_non_null(strstr(buf, options[i].help));
    }
    assert_non_null(strstr(buf, "--memory-limit SIZE"));
    assert_non_null(strstr(buf, "(default 1G; 64M..1T)"));
    assert_non_null(strstr(buf, "| `memory_limit` | `--memory-limit` | size | 1G |"));
    free(buf);
}

static void test_format_hides_secrets(void **state)
{
    struct conf c = {0};
    char err[64], buf[64];

    st_config_defaults(&table, &c);
    st_config_set(&table, &c, "token", "hunter2", "x", err, sizeof(err));
    st_config_format(&options[6], &c, buf, sizeof(buf));
    assert_string_equal(buf, "(hidden)");
    st_config_format(&options[1], &c, buf, sizeof(buf));
    assert_string_equal(buf, "1G");
    st_config_free(&table, &c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_file_then_flags),
        cmocka_unit_test(test_unknown_key_names_file_and_line),
        cmocka_unit_test(test_unknown_section),
        cmocka_unit_test(test_bad_values),
        cmocka_unit_test(test_out_of_range_names_bounds),
        cmocka_unit_test(test_missing_file),
        cmocka_unit_test(test_flag_errors_and_help),
        cmocka_unit_test(test_usage_and_markdown_come_from_the_table),
        cmocka_unit_test(test_format_hides_secrets),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
