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

#include "config.h"
#include "support/unit_main.h"

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
static const cfg_option_t options[] = {
    {"listen", CFG_STRING, OFF(listen), "127.0.0.1:7000", 0, 0, 0, NULL, 'l',
     "address to listen on"},
    {"memory_limit", CFG_SIZE, OFF(memory_limit), "1G", 64ll << 20, 1ll << 40, 0, NULL, 0,
     "memory limit"},
    {"lease", CFG_DURATION, OFF(lease), "5s", 10, 600000, 0, NULL, 0, "lease time"},
    {"workers", CFG_INT, OFF(workers), "2", 1, 64, 0, NULL, 'w', "worker threads"},
    {"verbose", CFG_BOOL, OFF(verbose), "false", 0, 0, 0, NULL, 'v', "chatty"},
    {"transport", CFG_ENUM, OFF(mode), "ucx", 0, 0, 0, modes, 0, "data plane"},
    {"token", CFG_STRING, OFF(token), "", 0, 0, CFG_SENSITIVE, NULL, 0, "secret"},
};
static const cfg_table_t table = {"testd", "a test daemon", NULL, options,
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

/* A config of the table's defaults and room for an error: the state of the
 * tests that set, load or parse into it. */
typedef struct cfx {
    struct conf c;
    char err[256];
} cfx_t;

static int setup(void **state)
{
    cfx_t *f = calloc(1, sizeof(*f));

    assert_non_null(f);
    cfg_defaults(&table, &f->c);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    cfx_t *f = *state;

    cfg_free(&table, &f->c);
    free(f);
    return 0;
}

/* cfg_set and cfg_parse_args into f, their error into f->err. */
static st_status_t cfx_set(cfx_t *f, const char *key, const char *value, const char *where)
{
    return cfg_set(&table, &f->c, key, value, where, f->err, sizeof(f->err));
}

static st_status_t cfx_parse(cfx_t *f, int argc, char **argv, int *npos, int *help)
{
    return cfg_parse_args(&table, &f->c, argc, argv, npos, help, f->err, sizeof(f->err));
}

/* Writes text to a file that loading into f refuses (ST_ERR_NOT_FOUND);
 * returns its path, removed again. */
static const char *load_refused(cfx_t *f, const char *text)
{
    const char *path = write_file(text);

    assert_int_equal(cfg_load_file(&table, &f->c, path, f->err, sizeof(f->err)), ST_ERR_NOT_FOUND);
    unlink(path);
    return path;
}

static void test_defaults(void **state)
{
    struct conf c = {0};

    assert_int_equal(cfg_defaults(&table, &c), ST_OK);
    assert_string_equal(c.listen, "127.0.0.1:7000");
    assert_int_equal(c.memory_limit, 1ull << 30);
    assert_int_equal(c.lease, 5000);
    assert_int_equal(c.workers, 2);
    assert_int_equal(c.verbose, 0);
    assert_int_equal(c.mode, 0);
    cfg_free(&table, &c);
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

    assert_int_equal(cfg_defaults(&table, &c), ST_OK);
    assert_int_equal(cfg_parse_args(&table, &c, 10, argv, &npos, &help, err, sizeof(err)), ST_OK);
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
    cfg_free(&table, &c);
}

static void test_unknown_key_names_file_and_line(void **state)
{
    cfx_t *f = *state;
    const char *path = load_refused(f, "workers = 3\n\nmemroy_limit = 2G\n");

    assert_non_null(strstr(f->err, "unknown key 'memroy_limit'"));
    assert_non_null(strstr(f->err, path));
    assert_non_null(strstr(f->err, ":3:"));
}

static void test_unknown_section(void **state)
{
    cfx_t *f = *state;

    load_refused(f, "[other]\nworkers = 3\n");
    assert_non_null(strstr(f->err, "unknown section '[other]'"));
}

static void test_bad_values(void **state)
{
    cfx_t *f = *state;

    assert_int_equal(cfx_set(f, "workers", "many", "x.ini:2"), ST_ERR_INVALID);
    assert_non_null(strstr(f->err, "x.ini:2: value 'many' for 'workers' is not an integer"));
    assert_int_equal(f->c.workers, 2); /* unchanged */

    assert_int_equal(cfx_set(f, "memory_limit", "12Q", "x"), ST_ERR_INVALID);
    assert_non_null(strstr(f->err, "is not a size"));
    assert_int_equal(cfx_set(f, "verbose", "maybe", "x"), ST_ERR_INVALID);
    assert_non_null(strstr(f->err, "boolean"));
    assert_int_equal(cfx_set(f, "transport", "tcp", "x"), ST_ERR_INVALID);
    assert_non_null(strstr(f->err, "ucx, libfabric"));
    assert_int_equal(cfx_set(f, "lease", "5 fortnights", "x"), ST_ERR_INVALID);
}

static void test_out_of_range_names_bounds(void **state)
{
    cfx_t *f = *state;

    assert_int_equal(cfx_set(f, "memory_limit", "1M", "--memory-limit"), ST_ERR_INVALID);
    assert_non_null(strstr(f->err, "memory_limit = 1M is out of range [64M, 1T]"));
    assert_int_equal(f->c.memory_limit, 1ull << 30);
    assert_int_equal(cfx_set(f, "workers", "65", "f:1"), ST_ERR_INVALID);
    assert_non_null(strstr(f->err, "[1, 64]"));
    assert_int_equal(cfx_set(f, "lease", "11m", "f:1"), ST_ERR_INVALID);
    assert_non_null(strstr(f->err, "[10ms, 10m]"));
}

static void test_missing_file(void **state)
{
    cfx_t *f = *state;
    int npos, help;
    char *argv[] = {"testd", "--config", "/nonexistent/strata.ini", NULL};

    assert_int_equal(cfx_parse(f, 3, argv, &npos, &help), ST_ERR_IO);
    assert_non_null(strstr(f->err, "cannot open config file '/nonexistent/strata.ini'"));
    assert_non_null(strstr(f->err, "No such file"));
}

static void test_flag_errors_and_help(void **state)
{
    cfx_t *f = *state;
    int npos, help;
    char *argv1[] = {"testd", "--frobnicate", NULL};
    char *argv2[] = {"testd", "--workers", NULL};
    char *argv3[] = {"testd", "--workers", "0", "--help", NULL};
    char *argv4[] = {"testd", "--no-verbose", "-w", "7", NULL};

    assert_int_equal(cfx_parse(f, 2, argv1, &npos, &help), ST_ERR_NOT_FOUND);
    assert_non_null(strstr(f->err, "unknown flag '--frobnicate'"));
    assert_int_equal(cfx_parse(f, 2, argv2, &npos, &help), ST_ERR_INVALID);
    assert_non_null(strstr(f->err, "missing value"));
    assert_int_equal(cfx_parse(f, 4, argv3, &npos, &help), ST_OK);
    assert_int_equal(help, 1);
    assert_int_equal(cfx_parse(f, 4, argv4, &npos, &help), ST_OK);
    assert_int_equal(f->c.verbose, 0);
    assert_int_equal(f->c.workers, 7);
}

static void test_usage_and_markdown_come_from_the_table(void **state)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);

    cfg_usage(&table, f);
    cfg_markdown(&table, f);
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
    cfx_t *f = *state;
    char buf[64];

    cfx_set(f, "token", "hunter2", "x");
    cfg_format(&options[6], &f->c, buf, sizeof(buf));
    assert_string_equal(buf, "(hidden)");
    cfg_format(&options[1], &f->c, buf, sizeof(buf));
    assert_string_equal(buf, "1G");
}

/* CFG_REPEAT: each occurrence of the flag adds a line; without it the last wins. */
static void test_repeat_adds_lines(void **state)
{
    struct rconf {
        char *image, *one;
    } c = {NULL, NULL};
    static const cfg_option_t ropts[] = {
        {"image", CFG_STRING, offsetof(struct rconf, image), "", 0, 0, CFG_REPEAT, NULL, 0, "i"},
        {"one", CFG_STRING, offsetof(struct rconf, one), "", 0, 0, 0, NULL, 0, "o"},
    };
    static const cfg_table_t rt = {"r", "repeat", NULL, ropts, 2};
    char *argv[] = {"r", "--image", "a.ppm@0", "--one", "x", "--image=b.png@64:3", "--one", "y"};
    char err[128];
    int npos = 0, help = 0;

    (void)state;
    assert_int_equal(cfg_defaults(&rt, &c), ST_OK);
    assert_int_equal(cfg_parse_args(&rt, &c, 8, argv, &npos, &help, err, sizeof(err)), ST_OK);
    assert_string_equal(c.image, "a.ppm@0\nb.png@64:3");
    assert_string_equal(c.one, "y");
    cfg_free(&rt, &c);
}

int main(void)
{
    UNIT_RUN(cmocka_unit_test(test_defaults), cmocka_unit_test(test_file_then_flags),
             UNIT_FIXTURE(test_unknown_key_names_file_and_line), UNIT_FIXTURE(test_unknown_section),
             UNIT_FIXTURE(test_bad_values), UNIT_FIXTURE(test_out_of_range_names_bounds),
             UNIT_FIXTURE(test_missing_file), UNIT_FIXTURE(test_flag_errors_and_help),
             cmocka_unit_test(test_usage_and_markdown_come_from_the_table),
             UNIT_FIXTURE(test_format_hides_secrets), cmocka_unit_test(test_repeat_adds_lines));
}
