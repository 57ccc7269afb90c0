/*
 * base.c - what every part of libstrata uses and that depends on none of
 * them: the per-thread error (sc_error, st_client_last_error) and the nodes'
 * placement and state on the ring (sc_owner, sc_node_failed) and their
 * channels (sc_node_channel_open).
 */
#include "client_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "log.h"

static __thread char sc_last_error[320];

st_status_t sc_error(st_status_t status, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(sc_last_error, sizeof(sc_last_error), fmt, ap);
    va_end(ap);
    return status;
}

const char *st_client_last_error(void)
{
    return sc_last_error;
}

/* ---------------------------------------------------------------- nodes -- */

int sc_owner(const st_client_t *c, const st_hash_t *first)
{
    uint32_t node;

    return ring_place(&c->ring, first, &node, 1) == 1 ? (int)node : -1;
}

void sc_node_failed(st_client_t *c, uint32_t i, st_status_t status, const srpc_error_t *err)
{
    /*
     * Down: unreachable or too slow. A node that does not know our namespace
     * has restarted since our Hello (a daemon forgets namespaces, and its
     * DRAM, on restart): it counts as down until the health checker has
     * said Hello to it again.
     */
    if (status == ST_ERR_UNAVAILABLE || status == ST_ERR_TIMEOUT ||
        (status == ST_ERR_NOT_FOUND && err != NULL && strstr(err->message, "namespace_id"))) {
        if (ring_is_up(&c->ring, i)) {
            lg_warn("node down node=%s error=\"%s\"", c->nodes[i].addr,
                    err != NULL ? err->message : st_strerror(status));
        }
        ring_set_up(&c->ring, i, 0);
    }
}

st_status_t sc_node_channel_open(st_client_t *c, uint32_t i)
{
    srpc_channel_config_t cc = {.token = c->token[0] ? c->token : NULL,
                                .tls_ca_pem = c->tls_ca_pem,
                                .tls_cert_pem = c->tls_cert_pem,
                                .tls_key_pem = c->tls_key_pem};
    st_status_t status = srpc_channel_open(c->nodes[i].addr, &cc, &c->nodes[i].ch);

    if (status != ST_OK) {
        const char *what = status == ST_ERR_INVALID ? " (the TLS files do not parse, or the "
                                                      "key is not the certificate's)"
                                                    : "";

        return sc_error(status, "cannot open a channel to %s%s", c->nodes[i].addr, what);
    }
    return ST_OK;
}
