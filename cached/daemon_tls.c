/*
 * daemon_tls.c - stratad's TLS: the PEM files of tls_cert, tls_key and
 * tls_ca, read at start and again on SIGHUP, for the gRPC server and for the
 * channels to peer daemons; the metrics server's certificate and token
 * (metrics_tls_cert, metrics_tls_key, metrics_token(_file)), read at start;
 * the metrics certificate and key are read again on SIGHUP too.
 *
 * A daemon with a certificate serves TLS only. Its peer channels then speak
 * TLS too: they verify the peer against tls_ca and present this daemon's
 * own certificate (so a peer that requires client certificates accepts it;
 * the certificate needs extendedKeyUsage clientAuth as well as serverAuth).
 */
#include "daemon.h"

#include <stdlib.h>
#include <string.h>

#include "log.h"

/* Reads the configured files into *cert_p, *key_p, *ca_p (NULL when not configured). */
static st_status_t cd_tls_read(const cd_config_t *cfg, char **cert_p, char **key_p, char **ca_p)
{
    char *cert = NULL, *key = NULL, *ca = NULL;
    st_status_t st = ST_OK;

    if (cfg->tls_cert[0] != '\0') {
        st = srpc_pem_load(cfg->tls_cert, &cert);
    }
    if (st == ST_OK && cfg->tls_key[0] != '\0') {
        st = srpc_pem_load(cfg->tls_key, &key);
    }
    if (st == ST_OK && cfg->tls_ca[0] != '\0') {
        st = srpc_pem_load(cfg->tls_ca, &ca);
    }
    if (st != ST_OK) {
        free(cert), free(key), free(ca);
        return st;
    }
    *cert_p = cert;
    *key_p = key;
    *ca_p = ca;
    return ST_OK;
}

st_status_t cd_tls_load(cd_daemon_t *d)
{
    const cd_config_t *cfg = &d->cfg;
    int has_cert = cfg->tls_cert[0] != '\0', has_key = cfg->tls_key[0] != '\0';

    if (has_cert != has_key) {
        lg_error("tls_cert and tls_key go together (only %s is set)",
                 has_cert ? "tls_cert" : "tls_key");
        return ST_ERR_INVALID;
    }
    if (!has_cert && cfg->tls_client_auth != SRPC_TLS_CLIENT_AUTH_NONE) {
        lg_error("tls_client_auth=%s needs TLS: set tls_cert and tls_key",
                 cfg->tls_client_auth == SRPC_TLS_CLIENT_AUTH_REQUIRE ? "require" : "request");
        return ST_ERR_INVALID;
    }
    if (cfg->tls_client_auth != SRPC_TLS_CLIENT_AUTH_NONE && cfg->tls_ca[0] == '\0') {
        lg_error("tls_client_auth=%s needs tls_ca, the CA that client certificates chain to",
                 cfg->tls_client_auth == SRPC_TLS_CLIENT_AUTH_REQUIRE ? "require" : "request");
        return ST_ERR_INVALID;
    }
    if (has_cert && d->view != NULL && d->view->n > 1 && cfg->tls_ca[0] == '\0') {
        lg_error("with TLS and peers, tls_ca must name the CA that the peers' certificates "
                 "chain to (peer calls verify it) peers=%s",
                 cfg->peers);
        return ST_ERR_INVALID;
    }
    return cd_tls_read(cfg, &d->tls_cert_pem, &d->tls_key_pem, &d->tls_ca_pem);
}

/* SIGHUP, gRPC: tls_cert, tls_key, tls_ca to the server and to new peer channels. */
static st_status_t cd_tls_reload_grpc(cd_daemon_t *d)
{
    char *cert = NULL, *key = NULL, *ca = NULL;
    st_status_t st;

    st = cd_tls_read(&d->cfg, &cert, &key, &ca);
    if (st == ST_OK) {
        st = srpc_server_reload_tls(d->server, cert, key, ca);
    }
    if (st != ST_OK) {
        lg_error("SIGHUP: the TLS files were not taken, the old certificate stays in use "
                 "tls_cert=%s tls_key=%s tls_ca=%s",
                 d->cfg.tls_cert, d->cfg.tls_key, d->cfg.tls_ca);
        free(cert), free(key), free(ca);
        return st;
    }
    /* Peer channels opened from now on use the new files; open ones keep theirs. */
    pthread_mutex_lock(&d->peer_lock);
    free(d->tls_cert_pem), free(d->tls_key_pem), free(d->tls_ca_pem);
    d->tls_cert_pem = cert;
    d->tls_key_pem = key;
    d->tls_ca_pem = ca;
    pthread_mutex_unlock(&d->peer_lock);
    lg_info("SIGHUP: TLS certificate reloaded tls_cert=%s", d->cfg.tls_cert);
    return ST_OK;
}

/* SIGHUP, metrics: metrics_tls_cert and metrics_tls_key to the HTTPS server. */
static st_status_t cd_tls_reload_metrics(cd_daemon_t *d)
{
    char *cert = NULL, *key = NULL;
    st_status_t st;

    st = srpc_pem_load(d->cfg.metrics_tls_cert, &cert);
    if (st == ST_OK) {
        st = srpc_pem_load(d->cfg.metrics_tls_key, &key);
    }
    if (st == ST_OK) {
        st = cd_obs_reload_tls(d->obs, cert, key);
    }
    if (st != ST_OK) {
        lg_error("SIGHUP: the metrics TLS files were not taken, the old certificate stays in "
                 "use metrics_tls_cert=%s metrics_tls_key=%s",
                 d->cfg.metrics_tls_cert, d->cfg.metrics_tls_key);
        free(cert), free(key);
        return st;
    }
    free(d->mx_cert_pem), free(d->mx_key_pem);
    d->mx_cert_pem = cert;
    d->mx_key_pem = key;
    lg_info("SIGHUP: metrics TLS certificate reloaded metrics_tls_cert=%s",
            d->cfg.metrics_tls_cert);
    return ST_OK;
}

st_status_t cd_daemon_reload_tls(cd_daemon_t *d)
{
    st_status_t st = ST_OK, mst = ST_OK;

    if (d->tls_cert_pem == NULL && d->mx_cert_pem == NULL) {
        lg_info("SIGHUP: TLS is off (no tls_cert, no metrics_tls_cert): nothing to reload");
        return ST_OK;
    }
    if (d->tls_cert_pem != NULL) {
        st = cd_tls_reload_grpc(d);
    }
    if (d->mx_cert_pem != NULL && d->obs != NULL) {
        mst = cd_tls_reload_metrics(d);
    }
    return st != ST_OK ? st : mst;
}

void cd_tls_peer_config(const cd_daemon_t *d, srpc_channel_config_t *cc)
{
    if (d->tls_cert_pem != NULL) {
        cc->tls_ca_pem = d->tls_ca_pem;
        cc->tls_cert_pem = d->tls_cert_pem;
        cc->tls_key_pem = d->tls_key_pem;
    }
}

st_status_t cd_tls_metrics(cd_daemon_t *d, mx_http_opts_t *sec)
{
    const cd_config_t *cfg = &d->cfg;
    int has_cert = cfg->metrics_tls_cert[0] != '\0', has_key = cfg->metrics_tls_key[0] != '\0';
    st_status_t st;

    if (has_cert != has_key) {
        lg_error("metrics_tls_cert and metrics_tls_key go together (only %s is set)",
                 has_cert ? "metrics_tls_cert" : "metrics_tls_key");
        return ST_ERR_INVALID;
    }
    if (cfg->metrics_token[0] != '\0' && cfg->metrics_token_file[0] != '\0') {
        lg_error("set metrics_token or metrics_token_file, not both");
        return ST_ERR_INVALID;
    }
    if (has_cert && ((st = srpc_pem_load(cfg->metrics_tls_cert, &d->mx_cert_pem)) != ST_OK ||
                     (st = srpc_pem_load(cfg->metrics_tls_key, &d->mx_key_pem)) != ST_OK)) {
        return st;
    }
    if (cfg->metrics_token_file[0] != '\0') {
        size_t n;

        if ((st = srpc_pem_load(cfg->metrics_token_file, &d->mx_token)) != ST_OK) {
            return st;
        }
        n = strlen(d->mx_token);
        while (n > 0 && (d->mx_token[n - 1] == '\n' || d->mx_token[n - 1] == '\r' ||
                         d->mx_token[n - 1] == ' ' || d->mx_token[n - 1] == '\t')) {
            d->mx_token[--n] = '\0';
        }
        if (n == 0 || strpbrk(d->mx_token, "\r\n") != NULL) {
            lg_error("metrics_token_file=%s must hold one non-empty line", cfg->metrics_token_file);
            return ST_ERR_INVALID;
        }
    }
    sec->tls_cert_pem = d->mx_cert_pem;
    sec->tls_key_pem = d->mx_key_pem;
    sec->token = d->mx_token != NULL ? d->mx_token : cfg->metrics_token;
    sec->cors_origins = cfg->metrics_cors_origin;
    return ST_OK;
}

void cd_tls_free(cd_daemon_t *d)
{
    free(d->tls_cert_pem), free(d->tls_key_pem), free(d->tls_ca_pem);
    d->tls_cert_pem = d->tls_key_pem = d->tls_ca_pem = NULL;
    free(d->mx_cert_pem), free(d->mx_key_pem);
    if (d->mx_token != NULL) {
        memset(d->mx_token, 0, strlen(d->mx_token));
    }
    free(d->mx_token);
    d->mx_cert_pem = d->mx_key_pem = d->mx_token = NULL;
}
