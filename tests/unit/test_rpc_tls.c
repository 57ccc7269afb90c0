/*
 * test_rpc_tls.c - the rpc framework over TLS on loopback, with certificates
 * made by tests/tools/make_test_certs.sh (the openssl CLI) in a temp dir:
 * a TLS server and a client with the CA; a plaintext client refused; mutual
 * TLS (request and require) with srpc_ctx_peer_identity() giving the client
 * certificate's CN; a certificate replaced while serving; bad material.
 *
 * Usage: test_rpc_tls MAKE_TEST_CERTS_SH
 *
 * The one method, strata.test.Tls/Whoami (HelloRequest -> HelloRequest),
 * answers with tenant = srpc_ctx_peer_identity() ("" for NULL) and
 * auth_token = the bearer token.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "srpc.h"
#include "log.h"
#include "strata.pb-c.h"

static const srpc_method_t whoami_method = {"/strata.test.Tls/Whoami",
                                            &strata__v1__hello_request__descriptor,
                                            &strata__v1__hello_request__descriptor};

static st_status_t whoami_handler(srpc_ctx_t *ctx, const ProtobufCMessage *req,
                                  ProtobufCMessage *resp, void *arg)
{
    Strata__V1__HelloRequest *rs = (void *)resp;
    const char *id = srpc_ctx_peer_identity(ctx);
    const char *token = srpc_ctx_token(ctx);

    (void)req;
    (void)arg;
    rs->tenant = srpc_ctx_alloc(ctx, (id ? strlen(id) : 0) + 1);
    rs->auth_token = srpc_ctx_alloc(ctx, (token ? strlen(token) : 0) + 1);
    if (rs->tenant == NULL || rs->auth_token == NULL) {
        return ST_ERR_NOMEM;
    }
    strcpy(rs->tenant, id ? id : "");
    strcpy(rs->auth_token, token ? token : "");
    return ST_OK;
}

static const srpc_method_def_t table[] = {{&whoami_method, whoami_handler, NULL, 0}};

static const char *g_script;
static char g_dir[] = "/tmp/strata-tls-XXXXXX";

/* The PEM text of DIR/name, loaded once per test and kept in a small table. */
#define N_PEMS 32
static struct {
    char name[64];
    char *pem;
} g_pems[N_PEMS];

static const char *pem(const char *name)
{
    char path[256];
    int i;

    for (i = 0; i < N_PEMS && g_pems[i].pem != NULL; i++) {
        if (strcmp(g_pems[i].name, name) == 0) {
            return g_pems[i].pem;
        }
    }
    assert_true(i < N_PEMS);
    snprintf(path, sizeof(path), "%s/%s", g_dir, name);
    assert_int_equal(srpc_pem_load(path, &g_pems[i].pem), ST_OK);
    snprintf(g_pems[i].name, sizeof(g_pems[i].name), "%s", name);
    return g_pems[i].pem;
}

static srpc_server_t *start_tls(srpc_tls_client_auth_t auth, const char *cert, const char *key)
{
    srpc_server_config_t cfg = {
        .address = "127.0.0.1:0",
        .n_threads = 2,
        .tls_cert_pem = cert ? pem(cert) : NULL,
        .tls_key_pem = key ? pem(key) : NULL,
        .tls_ca_pem = auth != SRPC_TLS_CLIENT_AUTH_NONE ? pem("ca.pem") : NULL,
        .tls_client_auth = auth,
    };
    srpc_server_t *srv = NULL;

    assert_int_equal(srpc_server_start(&cfg, table, 1, &srv), ST_OK);
    assert_int_equal(srpc_server_tls(srv), cert != NULL);
    return srv;
}

/*
 * Opens a channel to srv with the given CA and client certificate (files in
 * the cert dir, NULL: none) and calls Whoami once. Returns the call's status;
 * on ST_OK, *id_p (when not NULL) gets a copy of the identity the server saw.
 */
static st_status_t whoami(srpc_server_t *srv, const char *ca, const char *client, char **id_p)
{
    char target[64], cert[64], key[64];
    srpc_channel_config_t cc = {.token = "tok-1"};
    srpc_channel_t *ch = NULL;
    Strata__V1__HelloRequest rq = STRATA__V1__HELLO_REQUEST__INIT;
    Strata__V1__HelloRequest *rs = NULL;
    srpc_error_t err;
    st_status_t st;

    snprintf(target, sizeof(target), "127.0.0.1:%d", srpc_server_port(srv));
    cc.tls_ca_pem = ca ? pem(ca) : NULL;
    if (client != NULL) {
        snprintf(cert, sizeof(cert), "client-%s.pem", client);
        snprintf(key, sizeof(key), "client-%s.key", client);
        cc.tls_cert_pem = pem(cert);
        cc.tls_key_pem = pem(key);
    }
    assert_int_equal(srpc_channel_open(target, &cc, &ch), ST_OK);
    st = srpc_call(ch, &whoami_method, &rq.base, 5000, (ProtobufCMessage **)&rs, &err);
    if (st == ST_OK) {
        assert_string_equal(rs->auth_token, "tok-1");
        if (id_p != NULL) {
            *id_p = strdup(rs->tenant);
        }
        protobuf_c_message_free_unpacked(&rs->base, NULL);
    } else {
        print_message("whoami ca=%s client=%s: %s (grpc %d: %s)\n", ca ? ca : "-",
                      client ? client : "-", st_strerror(st), err.grpc_code, err.message);
    }
    srpc_channel_close(ch);
    return st;
}

/* ------------------------------------------------------------------ tests -- */

/* whoami with a client of CA ca (certificate cert, or none) connects, and
 * its handler sees the identity want. */
static void expect_identity(srpc_server_t *srv, const char *ca, const char *cert, const char *want)
{
    char *id = NULL;

    assert_int_equal(whoami(srv, ca, cert, &id), ST_OK);
    assert_string_equal(id, want);
    free(id);
}

/* A client with the CA talks TLS; a plaintext client and a client that
 * trusts another CA cannot connect. */
static void test_tls_server(void **state)
{
    srpc_server_t *srv = start_tls(SRPC_TLS_CLIENT_AUTH_NONE, "server.pem", "server.key");

    (void)state;
    expect_identity(srv, "ca.pem", NULL, ""); /* no client certificates asked for */
    assert_int_equal(whoami(srv, NULL, NULL, NULL), ST_ERR_UNAVAILABLE);           /* plaintext */
    assert_int_equal(whoami(srv, "other-ca.pem", NULL, NULL), ST_ERR_UNAVAILABLE); /* wrong CA */
    /* A certificate sent though none was asked for names nobody. */
    expect_identity(srv, "ca.pem", "acme", "");
    srpc_server_destroy(srv);
}

/* A TLS client does not fall back to plaintext. */
static void test_tls_client_plain_server(void **state)
{
    srpc_server_t *srv = start_tls(SRPC_TLS_CLIENT_AUTH_NONE, NULL, NULL);

    (void)state;
    assert_int_equal(whoami(srv, NULL, NULL, NULL), ST_OK);
    assert_int_equal(whoami(srv, "ca.pem", NULL, NULL), ST_ERR_UNAVAILABLE);
    srpc_server_destroy(srv);
}

/* require: no certificate or one of another CA cannot connect; a good one
 * gives its CN to the handler. */
static void test_mtls_require(void **state)
{
    srpc_server_t *srv = start_tls(SRPC_TLS_CLIENT_AUTH_REQUIRE, "server.pem", "server.key");

    (void)state;
    assert_int_equal(whoami(srv, "ca.pem", NULL, NULL), ST_ERR_UNAVAILABLE);
    assert_int_equal(whoami(srv, "ca.pem", "rogue", NULL), ST_ERR_UNAVAILABLE);
    expect_identity(srv, "ca.pem", "acme", "acme");
    expect_identity(srv, "ca.pem", "beta", "beta");
    srpc_server_destroy(srv);
}

/* request: a client without a certificate connects with no identity; one
 * with a certificate of another CA cannot connect. */
static void test_mtls_request(void **state)
{
    srpc_server_t *srv = start_tls(SRPC_TLS_CLIENT_AUTH_REQUEST, "server.pem", "server.key");

    (void)state;
    expect_identity(srv, "ca.pem", NULL, "");
    expect_identity(srv, "ca.pem", "acme", "acme");
    assert_int_equal(whoami(srv, "ca.pem", "rogue", NULL), ST_ERR_UNAVAILABLE);
    srpc_server_destroy(srv);
}

/* A replaced certificate reaches new connections; bad material is refused
 * and the certificate in use stays. */
static void test_reload(void **state)
{
    srpc_server_t *srv = start_tls(SRPC_TLS_CLIENT_AUTH_NONE, "server.pem", "server.key");

    (void)state;
    assert_int_equal(whoami(srv, "ca.pem", NULL, NULL), ST_OK);
    assert_int_equal(whoami(srv, "other-ca.pem", NULL, NULL), ST_ERR_UNAVAILABLE);

    /* A key of another certificate, garbage, a missing key: refused. */
    assert_int_equal(srpc_server_reload_tls(srv, pem("server-other.pem"), pem("server.key"), NULL),
                     ST_ERR_INVALID);
    assert_int_equal(srpc_server_reload_tls(srv, "not a certificate", pem("server.key"), NULL),
                     ST_ERR_INVALID);
    assert_int_equal(srpc_server_reload_tls(srv, pem("server-other.pem"), NULL, NULL),
                     ST_ERR_INVALID);
    assert_int_equal(whoami(srv, "ca.pem", NULL, NULL), ST_OK);

    assert_int_equal(
        srpc_server_reload_tls(srv, pem("server-other.pem"), pem("server-other.key"), NULL), ST_OK);
    assert_int_equal(whoami(srv, "other-ca.pem", NULL, NULL), ST_OK);
    assert_int_equal(whoami(srv, "ca.pem", NULL, NULL), ST_ERR_UNAVAILABLE);
    /* And back, twice in a row: the last one wins. */
    assert_int_equal(
        srpc_server_reload_tls(srv, pem("server-other.pem"), pem("server-other.key"), NULL), ST_OK);
    assert_int_equal(srpc_server_reload_tls(srv, pem("server2.pem"), pem("server2.key"), NULL),
                     ST_OK);
    assert_int_equal(whoami(srv, "ca.pem", NULL, NULL), ST_OK);
    srpc_server_destroy(srv);

    /* A plaintext server has nothing to reload. */
    srv = start_tls(SRPC_TLS_CLIENT_AUTH_NONE, NULL, NULL);
    assert_int_equal(srpc_server_reload_tls(srv, pem("server.pem"), pem("server.key"), NULL),
                     ST_ERR_INVALID);
    srpc_server_destroy(srv);
}

/* Bad TLS configurations are refused with ST_ERR_INVALID before anything binds. */
static void test_config_errors(void **state)
{
    srpc_server_config_t cfg = {.address = "127.0.0.1:0"};
    srpc_channel_config_t cc = {0};
    srpc_server_t *srv = NULL;
    srpc_channel_t *ch = NULL;
    char *text = NULL;

    (void)state;
    cfg.tls_cert_pem = pem("server.pem"); /* no key */
    assert_int_equal(srpc_server_start(&cfg, table, 1, &srv), ST_ERR_INVALID);
    cfg.tls_key_pem = pem("server2.key"); /* another certificate's key */
    assert_int_equal(srpc_server_start(&cfg, table, 1, &srv), ST_ERR_INVALID);
    cfg.tls_key_pem = "-----BEGIN PRIVATE KEY-----\nnope\n-----END PRIVATE KEY-----\n";
    assert_int_equal(srpc_server_start(&cfg, table, 1, &srv), ST_ERR_INVALID);
    cfg.tls_key_pem = pem("server.key");
    cfg.tls_client_auth = SRPC_TLS_CLIENT_AUTH_REQUIRE; /* no CA */
    assert_int_equal(srpc_server_start(&cfg, table, 1, &srv), ST_ERR_INVALID);
    cfg.tls_ca_pem = "garbage";
    assert_int_equal(srpc_server_start(&cfg, table, 1, &srv), ST_ERR_INVALID);
    cfg.tls_ca_pem = pem("ca.pem");
    cfg.tls_client_auth = (srpc_tls_client_auth_t)7;
    assert_int_equal(srpc_server_start(&cfg, table, 1, &srv), ST_ERR_INVALID);
    cfg.tls_cert_pem = cfg.tls_key_pem = NULL; /* client certificates without TLS */
    cfg.tls_client_auth = SRPC_TLS_CLIENT_AUTH_REQUEST;
    assert_int_equal(srpc_server_start(&cfg, table, 1, &srv), ST_ERR_INVALID);
    assert_null(srv);

    cc.tls_cert_pem = pem("client-acme.pem"); /* a client certificate without a CA */
    cc.tls_key_pem = pem("client-acme.key");
    assert_int_equal(srpc_channel_open("127.0.0.1:1", &cc, &ch), ST_ERR_INVALID);
    cc.tls_ca_pem = pem("ca.pem");
    cc.tls_key_pem = pem("client-beta.key");
    assert_int_equal(srpc_channel_open("127.0.0.1:1", &cc, &ch), ST_ERR_INVALID);
    cc.tls_ca_pem = "no CA here";
    cc.tls_cert_pem = cc.tls_key_pem = NULL;
    assert_int_equal(srpc_channel_open("127.0.0.1:1", &cc, &ch), ST_ERR_INVALID);
    assert_null(ch);

    assert_int_equal(srpc_pem_load("/nonexistent/ca.pem", &text), ST_ERR_IO);
    assert_int_equal(srpc_pem_load("/tmp", &text), ST_ERR_INVALID);
    assert_int_equal(srpc_pem_load("", &text), ST_ERR_INVALID);
    assert_null(text);
}

static int make_certs(void **state)
{
    char cmd[1024];

    (void)state;
    if (mkdtemp(g_dir) == NULL) {
        return -1;
    }
    snprintf(cmd, sizeof(cmd), "bash '%s' '%s' acme beta", g_script, g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

static int remove_certs(void **state)
{
    char cmd[256];

    (void)state;
    for (int i = 0; i < N_PEMS; i++) {
        free(g_pems[i].pem);
    }
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tls_server),   cmocka_unit_test(test_tls_client_plain_server),
        cmocka_unit_test(test_mtls_require), cmocka_unit_test(test_mtls_request),
        cmocka_unit_test(test_reload),       cmocka_unit_test(test_config_errors),
    };
    const char *verbose = getenv("STRATA_TEST_VERBOSE");

    if (argc != 2) {
        fprintf(stderr, "usage: %s MAKE_TEST_CERTS_SH\n", argv[0]);
        return 2;
    }
    if (system("command -v openssl >/dev/null") != 0) {
        fprintf(stderr, "openssl CLI missing (apt-get install openssl): skipped\n");
        return 77;
    }
    g_script = argv[1];
    lg_set_level(verbose == NULL ? LG_ERROR : LG_DEBUG);
    return cmocka_run_group_tests_name("rpc tls", tests, make_certs, remove_certs);
}
