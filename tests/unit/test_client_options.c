/*
 * test_client_options.c - libstrata's one option table (client/options.c):
 * defaults, the config file, the params that win over it, the errors, and
 * the flags and params of the `strata` command.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "client_options.h"
#include "support/unit_main.h"

/* Writes text to this process's temporary INI file; returns its path (static). */
static const char *write_ini(const char *text)
{
    static char path[64];
    FILE *f;

    snprintf(path, sizeof(path), "/tmp/test_client_options.%d.ini", (int)getpid());
    f = fopen(path, "w");
    assert_non_null(f);
    assert_true(fputs(text, f) >= 0);
    assert_int_equal(fclose(f), 0);
    return path;
}

/* The row called name. */
static const sc_option_t *row_named(const char *name)
{
    for (size_t i = 0; i < sc_n_options; i++) {
        if (strcmp(sc_option_table[i].key.name, name) == 0) {
            return &sc_option_table[i];
        }
    }
    fail_msg("no row %s", name);
    return NULL;
}

/* Every row's default is what it says, and what docs/configuration.md documents. */
static void test_defaults(void **state)
{
    static const struct {
        const char *name, *value;
    } documented[] = {
        {"nodes", ""},
        {"tenant", "default"},
        {"model", "default"},
        {"transport", "inline"},
        {"replicas", "0"},
        {"write_quorum", "0"},
        {"vnodes", "128"},
        {"timeout", "5s"},
        {"health_interval", "1s"},
        {"verify_reads", "lease"},
        {"cache_locations", "rows"},
        {"transport_calls", "true"},
        {"copy_threads", "2"},
        {"tls_ca", ""},
        {"tls_cert", ""},
        {"tls_key", ""},
    };
    st_client_params_t p = {0};
    sc_options_t o;
    char buf[64];

    (void)state;
    assert_int_equal(sc_options_load(&p, &o), ST_OK);
    for (size_t i = 0; i < sizeof(documented) / sizeof(documented[0]); i++) {
        const sc_option_t *row = row_named(documented[i].name);

        assert_string_equal(row->key.defval, documented[i].value);
        cfg_format(&row->key, &o, buf, sizeof(buf));
        assert_string_equal(buf, documented[i].value);
    }
    assert_string_equal(o.token, "");
    assert_int_equal(o.timeout_ms, 5000);
    sc_options_free(&o);
}

static void test_file_then_params(void **state)
{
    const char *path = write_ini("tenant = t1\nmodel = m1\nvnodes = 64\nverify_reads = always\n"
                                 "token = s3cret\n");
    st_client_params_t p = {0};
    sc_options_t o;

    (void)state;
    p.field_mask = ST_CLIENT_FIELD_CONFIG_FILE | ST_CLIENT_FIELD_TENANT | ST_CLIENT_FIELD_MODEL |
                   ST_CLIENT_FIELD_NODES | ST_CLIENT_FIELD_VNODES | ST_CLIENT_FIELD_TOKEN |
                   ST_CLIENT_FIELD_CACHE_LOCATIONS | ST_CLIENT_FIELD_TRANSPORT_CALLS;
    p.config_file = path;
    p.tenant = "p"; /* wins over the file */
    p.model = "";   /* empty: the file's */
    p.token = NULL; /* NULL: the file's */
    p.nodes = "";   /* empty nodes stay empty (connect says "no nodes given") */
    p.vnodes = 0;   /* a parameter is not checked here: connect refuses 0 */
    p.cache_locations = "all";
    p.transport_calls = 7;
    assert_int_equal(sc_options_load(&p, &o), ST_OK);
    assert_string_equal(o.tenant, "p");
    assert_string_equal(o.model, "m1");
    assert_string_equal(o.token, "s3cret");
    assert_string_equal(o.nodes, "");
    assert_int_equal(o.vnodes, 0);
    assert_int_equal(o.verify_reads, 1);
    assert_int_equal(o.cache_locations, 1);
    assert_int_equal(o.transport_calls, 1);
    sc_options_free(&o);
    unlink(path);
}

static void test_errors(void **state)
{
    const char *path = write_ini("nodes = a:1\nbogus = 1\n");
    st_client_params_t p = {0};
    sc_options_t o;
    char want[128];

    (void)state;
    p.field_mask = ST_CLIENT_FIELD_VERIFY_READS;
    p.verify_reads = "sometimes";
    assert_int_equal(sc_options_load(&p, &o), ST_ERR_INVALID);
    assert_string_equal(st_client_last_error(),
                        "verify_reads 'sometimes': expected lease or always");
    p.verify_reads = NULL;
    assert_int_equal(sc_options_load(&p, &o), ST_ERR_INVALID);
    assert_string_equal(st_client_last_error(), "verify_reads '': expected lease or always");
    p.field_mask = ST_CLIENT_FIELD_CACHE_LOCATIONS;
    p.cache_locations = "some";
    assert_int_equal(sc_options_load(&p, &o), ST_ERR_INVALID);
    assert_string_equal(st_client_last_error(), "cache_locations 'some': expected rows or all");
    p.field_mask = ST_CLIENT_FIELD_COPY_THREADS;
    p.copy_threads = 17;
    assert_int_equal(sc_options_load(&p, &o), ST_ERR_INVALID);
    assert_string_equal(st_client_last_error(), "copy_threads 17: expected 1 to 16");
    p.copy_threads = 0;
    assert_int_equal(sc_options_load(&p, &o), ST_ERR_INVALID);
    p.field_mask = ST_CLIENT_FIELD_CONFIG_FILE;
    p.config_file = path;
    assert_int_equal(sc_options_load(&p, &o), ST_ERR_NOT_FOUND);
    snprintf(want, sizeof(want), "%s:2: unknown key 'bogus'", path);
    assert_string_equal(st_client_last_error(), want);
    unlink(path);
    p.config_file = "/nonexistent/strata.ini";
    assert_int_equal(sc_options_load(&p, &o), ST_ERR_IO);
}

/* A command's config: the connection settings inside a bigger struct. */
struct cli_like {
    int before;
    sc_options_t conn;
};

/* The command's flags: every setting but vnodes and health_interval, over a bigger struct. */
static void test_cli_flags(void **state)
{
    cfg_option_t flags[64];
    size_t n;

    (void)state;
    assert_true(sc_n_options <= 64);
    n = sc_options_flags(flags, offsetof(struct cli_like, conn));
    assert_int_equal(n, sc_n_options - 2);
    for (size_t i = 0; i < n; i++) {
        assert_string_not_equal(flags[i].name, "vnodes");
        assert_string_not_equal(flags[i].name, "health_interval");
        assert_true(flags[i].offset >= offsetof(struct cli_like, conn));
    }
    assert_string_equal(flags[0].name, "nodes");
    assert_string_equal(flags[0].defval, "127.0.0.1:7700");
    assert_int_equal(flags[0].short_flag, 'n');
    assert_int_equal(flags[0].offset, offsetof(struct cli_like, conn.nodes));
}

/* The command's settings as params: the bits of its flags, the values as set. */
static void test_cli_params(void **state)
{
    st_client_params_t in = {0}, p = {0};
    sc_options_t o;

    (void)state;
    in.field_mask = ST_CLIENT_FIELD_VERIFY_READS | ST_CLIENT_FIELD_TIMEOUT;
    in.verify_reads = "always";
    in.timeout_ms = 250;
    assert_int_equal(sc_options_load(&in, &o), ST_OK);
    sc_options_params(&o, &p);
    assert_int_equal(p.field_mask,
                     ST_CLIENT_FIELD_NODES | ST_CLIENT_FIELD_TENANT | ST_CLIENT_FIELD_MODEL |
                         ST_CLIENT_FIELD_TOKEN | ST_CLIENT_FIELD_TIMEOUT |
                         ST_CLIENT_FIELD_REPLICAS | ST_CLIENT_FIELD_TRANSPORT |
                         ST_CLIENT_FIELD_VERIFY_READS | ST_CLIENT_FIELD_CACHE_LOCATIONS |
                         ST_CLIENT_FIELD_TRANSPORT_CALLS | ST_CLIENT_FIELD_COPY_THREADS |
                         ST_CLIENT_FIELD_WRITE_QUORUM | ST_CLIENT_FIELD_TLS_CA |
                         ST_CLIENT_FIELD_TLS_CERT | ST_CLIENT_FIELD_TLS_KEY | ST_CLIENT_FIELD_ETCD |
                         ST_CLIENT_FIELD_ETCD_PREFIX);
    assert_string_equal(p.verify_reads, "always");
    assert_string_equal(p.cache_locations, "rows");
    assert_string_equal(p.tenant, "default");
    assert_ptr_equal(p.nodes, o.nodes);
    assert_int_equal(p.timeout_ms, 250);
    assert_int_equal(p.copy_threads, 2);
    assert_int_equal(p.transport_calls, 1);
    sc_options_free(&o);
}

int main(void)
{
    UNIT_RUN(cmocka_unit_test(test_defaults), cmocka_unit_test(test_file_then_params),
             cmocka_unit_test(test_errors), cmocka_unit_test(test_cli_flags),
             cmocka_unit_test(test_cli_params));
}
