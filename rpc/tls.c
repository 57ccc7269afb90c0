/*
 * tls.c - TLS for the control plane: server credentials whose certificate can
 * be replaced while serving, channel credentials, PEM checks, and the peer
 * identity of a call.
 *
 * Server. gRPC's SSL server credentials take a certificate config fetcher:
 * a callback that gRPC runs before each new handshake. srpc_server_reload_tls()
 * checks the new PEM strings and parks a new config; the next handshake's
 * fetch hands it to gRPC (RELOAD_NEW), every later one says UNCHANGED. So a
 * replaced certificate reaches new connections, and connections already open
 * keep theirs.
 *
 * The PEM strings are checked with OpenSSL before gRPC sees them (gRPC itself
 * reports a bad key only at the first handshake, on its own log): every
 * certificate must parse, the key must parse and match the first certificate.
 */
#include "srpc_internal.h"
#include "server_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <grpc/grpc_security.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include "log.h"

#define SRPC_PEM_MAX (1u << 20) /* a PEM file larger than 1 MiB is not a certificate */

struct srpc_tls_state {
    pthread_mutex_t lock;
    grpc_ssl_server_certificate_config *pending; /* NULL: nothing new */
    uint64_t reloads;                            /* configs handed to gRPC */
};

/* ------------------------------------------------------------ PEM checks -- */

/* The first OpenSSL error of this thread as text, and the queue cleared. */
static const char *srpc_ssl_error(char *buf, size_t cap)
{
    unsigned long e = ERR_get_error();

    if (e == 0) {
        snprintf(buf, cap, "no PEM data");
    } else {
        ERR_error_string_n(e, buf, cap);
    }
    ERR_clear_error();
    return buf;
}

/* Counts the certificates of pem; 0 with *why set when one does not parse. */
static int srpc_pem_certs(const char *pem, X509 **first_p, char *why, size_t cap)
{
    BIO *bio = BIO_new_mem_buf(pem, -1);
    int n = 0;
    X509 *x;

    if (bio == NULL) {
        snprintf(why, cap, "out of memory");
        return 0;
    }
    ERR_clear_error();
    while ((x = PEM_read_bio_X509(bio, NULL, NULL, NULL)) != NULL) {
        if (n == 0 && first_p != NULL) {
            *first_p = x;
        } else {
            X509_free(x);
        }
        n++;
    }
    /* The loop ends with "no start line" at the end of the data: not an error. */
    if (n > 0 && ERR_GET_REASON(ERR_peek_last_error()) == PEM_R_NO_START_LINE) {
        ERR_clear_error();
    } else if (n == 0 || ERR_peek_error() != 0) {
        srpc_ssl_error(why, cap);
        if (n > 0 && first_p != NULL) {
            X509_free(*first_p);
            *first_p = NULL;
        }
        n = 0;
    }
    BIO_free(bio);
    return n;
}

st_status_t srpc_tls_check(const char *cert_pem, const char *key_pem, const char *ca_pem)
{
    char why[256];
    X509 *cert = NULL;
    EVP_PKEY *key = NULL;
    BIO *bio;
    st_status_t st = ST_OK;

    if (ca_pem != NULL && srpc_pem_certs(ca_pem, NULL, why, sizeof(why)) == 0) {
        lg_error("tls: the CA bundle holds no readable certificate: %s", why);
        return ST_ERR_INVALID;
    }
    if (cert_pem == NULL && key_pem == NULL) {
        return ST_OK;
    }
    if (cert_pem == NULL || key_pem == NULL) {
        lg_error("tls: a certificate needs its key and a key its certificate (got only the %s)",
                 cert_pem ? "certificate" : "key");
        return ST_ERR_INVALID;
    }
    if (srpc_pem_certs(cert_pem, &cert, why, sizeof(why)) == 0) {
        lg_error("tls: the certificate does not parse: %s", why);
        return ST_ERR_INVALID;
    }
    bio = BIO_new_mem_buf(key_pem, -1);
    key = bio ? PEM_read_bio_PrivateKey(bio, NULL, NULL, NULL) : NULL;
    BIO_free(bio);
    if (key == NULL) {
        lg_error("tls: the private key does not parse (or is encrypted): %s",
                 srpc_ssl_error(why, sizeof(why)));
        st = ST_ERR_INVALID;
    } else if (X509_check_private_key(cert, key) != 1) {
        lg_error("tls: the private key does not belong to the certificate: %s",
                 srpc_ssl_error(why, sizeof(why)));
        st = ST_ERR_INVALID;
    }
    EVP_PKEY_free(key);
    X509_free(cert);
    return st;
}

st_status_t srpc_pem_load(const char *path, char **pem_p)
{
    FILE *f;
    struct stat sb;
    char *buf;
    size_t got;

    if (path == NULL || path[0] == '\0') {
        lg_error("tls: no file name given");
        return ST_ERR_INVALID;
    }
    f = fopen(path, "rb");
    if (f == NULL) {
        lg_error("tls: cannot open file=%s: %s", path, strerror(errno));
        return ST_ERR_IO;
    }
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size > SRPC_PEM_MAX) {
        lg_error("tls: not a regular file of at most %u bytes file=%s", SRPC_PEM_MAX, path);
        fclose(f);
        return ST_ERR_INVALID;
    }
    buf = malloc((size_t)sb.st_size + 1);
    if (buf == NULL) {
        fclose(f);
        lg_error("tls: out of memory reading file=%s", path);
        return ST_ERR_NOMEM;
    }
    got = fread(buf, 1, (size_t)sb.st_size, f);
    fclose(f);
    if (got != (size_t)sb.st_size || memchr(buf, '\0', got) != NULL) {
        lg_error("tls: cannot read file=%s (short read or NUL bytes)", path);
        free(buf);
        return ST_ERR_IO;
    }
    buf[got] = '\0';
    *pem_p = buf;
    return ST_OK;
}

/* ---------------------------------------------------------------- server -- */

/*
 * gRPC 1.51 asserts that a config from a fetcher has root certificates even
 * when no client certificate is asked for: without a CA, the server's own
 * chain stands in (never used, since client certificates are not requested).
 */
static grpc_ssl_server_certificate_config *srpc_tls_config(const char *cert_pem,
                                                           const char *key_pem, const char *ca_pem)
{
    grpc_ssl_pem_key_cert_pair pair = {key_pem, cert_pem};

    return grpc_ssl_server_certificate_config_create(ca_pem ? ca_pem : cert_pem, &pair, 1);
}

/* gRPC's fetcher, run before each handshake: hands over a parked config once. */
static grpc_ssl_certificate_config_reload_status
srpc_tls_fetch(void *arg, grpc_ssl_server_certificate_config **config)
{
    srpc_tls_state_t *t = arg;
    grpc_ssl_certificate_config_reload_status rs = GRPC_SSL_CERTIFICATE_CONFIG_RELOAD_UNCHANGED;

    pthread_mutex_lock(&t->lock);
    if (t->pending != NULL) {
        *config = t->pending;
        t->pending = NULL;
        t->reloads++;
        rs = GRPC_SSL_CERTIFICATE_CONFIG_RELOAD_NEW;
    }
    pthread_mutex_unlock(&t->lock);
    return rs;
}

static grpc_ssl_client_certificate_request_type srpc_tls_request(srpc_tls_client_auth_t a)
{
    switch (a) {
    case SRPC_TLS_CLIENT_AUTH_REQUEST: return GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY;
    case SRPC_TLS_CLIENT_AUTH_REQUIRE:
        return GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
    case SRPC_TLS_CLIENT_AUTH_NONE:
    default: return GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE;
    }
}

st_status_t srpc_tls_check_server_config(const srpc_server_config_t *cfg)
{
    if (cfg->tls_cert_pem == NULL && cfg->tls_key_pem == NULL) {
        if (cfg->tls_client_auth != SRPC_TLS_CLIENT_AUTH_NONE) {
            lg_error("rpc server: client certificates need TLS (no certificate and key) "
                     "address=%s",
                     cfg->address);
            return ST_ERR_INVALID;
        }
        return ST_OK;
    }
    if ((unsigned)cfg->tls_client_auth > SRPC_TLS_CLIENT_AUTH_REQUIRE) {
        lg_error("rpc server: tls_client_auth=%d is not none, request or require",
                 (int)cfg->tls_client_auth);
        return ST_ERR_INVALID;
    }
    if (cfg->tls_client_auth != SRPC_TLS_CLIENT_AUTH_NONE && cfg->tls_ca_pem == NULL) {
        lg_error("rpc server: client certificates (request or require) need a CA to verify "
                 "them address=%s",
                 cfg->address);
        return ST_ERR_INVALID;
    }
    return srpc_tls_check(cfg->tls_cert_pem, cfg->tls_key_pem, cfg->tls_ca_pem);
}

st_status_t srpc_tls_server_creds(srpc_server_t *srv, const srpc_server_config_t *cfg,
                                  grpc_server_credentials **creds_p)
{
    srpc_tls_state_t *t;
    grpc_ssl_server_credentials_options *opts;

    if (cfg->tls_cert_pem == NULL) {
        *creds_p = grpc_insecure_server_credentials_create();
        return ST_OK;
    }
    t = calloc(1, sizeof(*t));
    if (t == NULL) {
        return ST_ERR_NOMEM;
    }
    pthread_mutex_init(&t->lock, NULL);
    t->pending = srpc_tls_config(cfg->tls_cert_pem, cfg->tls_key_pem, cfg->tls_ca_pem);
    srv->tls = t;
    srv->tls_client_auth = cfg->tls_client_auth;
    if (t->pending == NULL) {
        return ST_ERR_NOMEM;
    }
    opts = grpc_ssl_server_credentials_create_options_using_config_fetcher(
        srpc_tls_request(cfg->tls_client_auth), srpc_tls_fetch, t);
    *creds_p = opts ? grpc_ssl_server_credentials_create_with_options(opts) : NULL;
    if (*creds_p == NULL) {
        lg_error("rpc server: gRPC refused the TLS configuration address=%s", cfg->address);
        return ST_ERR_INTERNAL;
    }
    return ST_OK;
}

void srpc_tls_state_free(srpc_tls_state_t *t)
{
    if (t == NULL) {
        return;
    }
    if (t->pending != NULL) {
        grpc_ssl_server_certificate_config_destroy(t->pending);
    }
    pthread_mutex_destroy(&t->lock);
    free(t);
}

st_status_t srpc_server_reload_tls(srpc_server_t *srv, const char *cert_pem, const char *key_pem,
                                   const char *ca_pem)
{
    srpc_tls_state_t *t = srv->tls;
    grpc_ssl_server_certificate_config *cfg, *old;
    st_status_t st;

    if (t == NULL) {
        lg_error("rpc server: TLS certificates cannot be reloaded on a plaintext server port=%d",
                 srv->port);
        return ST_ERR_INVALID;
    }
    if (cert_pem == NULL || key_pem == NULL) {
        lg_error("rpc server: a TLS reload needs a certificate and a key port=%d", srv->port);
        return ST_ERR_INVALID;
    }
    if (srv->tls_client_auth != SRPC_TLS_CLIENT_AUTH_NONE && ca_pem == NULL) {
        lg_error("rpc server: client certificates are checked, so a TLS reload needs the CA "
                 "port=%d",
                 srv->port);
        return ST_ERR_INVALID;
    }
    st = srpc_tls_check(cert_pem, key_pem, ca_pem);
    if (st != ST_OK) {
        return st;
    }
    cfg = srpc_tls_config(cert_pem, key_pem, ca_pem);
    if (cfg == NULL) {
        lg_error("rpc server: out of memory for the new TLS configuration port=%d", srv->port);
        return ST_ERR_NOMEM;
    }
    pthread_mutex_lock(&t->lock);
    old = t->pending;
    t->pending = cfg;
    pthread_mutex_unlock(&t->lock);
    if (old != NULL) {
        grpc_ssl_server_certificate_config_destroy(old);
    }
    lg_info("rpc server: new TLS certificate, used from the next connection on port=%d", srv->port);
    return ST_OK;
}

bool srpc_server_tls(const srpc_server_t *srv)
{
    return srv->tls != NULL;
}

/* ---------------------------------------------------------- peer identity -- */

const char *srpc_tls_peer_cn(grpc_call *call, char *buf, size_t cap)
{
    grpc_auth_context *ac = grpc_call_auth_context(call);
    grpc_auth_property_iterator it;
    const grpc_auth_property *p;
    const char *out = NULL;

    if (ac == NULL) {
        return NULL;
    }
    /* A CN is an identity only when gRPC verified the chain: a transport
     * without a verified peer certificate has no x509 properties at all. */
    it = grpc_auth_context_find_properties_by_name(ac, GRPC_X509_CN_PROPERTY_NAME);
    p = grpc_auth_property_iterator_next(&it);
    if (p != NULL && p->value_length > 0 && p->value_length < cap &&
        memchr(p->value, '\0', p->value_length) == NULL) {
        memcpy(buf, p->value, p->value_length);
        buf[p->value_length] = '\0';
        out = buf;
    }
    grpc_auth_context_release(ac);
    return out;
}

/* ---------------------------------------------------------------- client -- */

st_status_t srpc_tls_channel_creds(const char *target, const srpc_channel_config_t *cfg,
                                   grpc_channel_credentials **creds_p)
{
    grpc_ssl_pem_key_cert_pair pair;
    st_status_t st;

    if (cfg == NULL || (cfg->tls_ca_pem == NULL && cfg->tls_cert_pem == NULL)) {
        *creds_p = grpc_insecure_credentials_create();
        return ST_OK;
    }
    if (cfg->tls_ca_pem == NULL) {
        lg_error("rpc channel: a client certificate needs TLS, and TLS needs the CA that "
                 "signed the server's certificate (tls_ca) target=%s",
                 target);
        return ST_ERR_INVALID;
    }
    st = srpc_tls_check(cfg->tls_cert_pem, cfg->tls_key_pem, cfg->tls_ca_pem);
    if (st != ST_OK) {
        lg_error("rpc channel: bad TLS material target=%s", target);
        return st;
    }
    pair.private_key = cfg->tls_key_pem;
    pair.cert_chain = cfg->tls_cert_pem;
    *creds_p = grpc_ssl_credentials_create_ex(cfg->tls_ca_pem, cfg->tls_cert_pem ? &pair : NULL,
                                              NULL, NULL);
    if (*creds_p == NULL) {
        lg_error("rpc channel: gRPC refused the TLS configuration target=%s", target);
        return ST_ERR_INTERNAL;
    }
    return ST_OK;
}
