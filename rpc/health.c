/*
 * health.c - grpc.health.v1.Health/Check, served by every srpc server.
 *
 * The table holds "" (the server as a whole) and the service of every method
 * the server was started with, all SERVING at start. srpc_server_stop()
 * turns them all NOT_SERVING before the listener closes.
 */
#include "server_internal.h"

#include <string.h>

#include "health.pb-c.h"
#include "log.h"

/* Finds service in the table; health_lock held. */
static srpc_health_entry_t *srpc_health_find(srpc_server_t *srv, const char *service, size_t len)
{
    for (size_t i = 0; i < srv->n_health; i++) {
        if (strlen(srv->health[i].service) == len &&
            memcmp(srv->health[i].service, service, len) == 0) {
            return &srv->health[i];
        }
    }
    return NULL;
}

/* Sets (adding if new) the status of service[0..len); health_lock held. */
static st_status_t srpc_health_put(srpc_server_t *srv, const char *service, size_t len,
                                   bool serving)
{
    srpc_health_entry_t *e = srpc_health_find(srv, service, len);

    if (e == NULL) {
        if (srv->n_health == SRPC_MAX_HEALTH) {
            return ST_ERR_EXHAUSTED;
        }
        e = &srv->health[srv->n_health++];
        memcpy(e->service, service, len);
        e->service[len] = '\0';
    }
    e->serving = serving;
    return ST_OK;
}

st_status_t srpc_health_init(srpc_server_t *srv)
{
    st_status_t st = srpc_health_put(srv, "", 0, true);

    for (size_t i = 0; i < srv->n_methods && st == ST_OK; i++) {
        const char *path = srv->methods[i].method->path + 1; /* "/svc/Method" */
        const char *slash = strchr(path, '/');
        size_t len = (size_t)(slash - path);

        if (len > SRPC_MAX_SERVICE_LEN) {
            lg_error("rpc server: service name too long method=%s", path - 1);
            return ST_ERR_INVALID;
        }
        st = srpc_health_put(srv, path, len, true);
    }
    if (st != ST_OK) {
        lg_error("rpc server: too many services limit=%d", SRPC_MAX_HEALTH);
    }
    return st;
}

st_status_t srpc_server_set_serving(srpc_server_t *srv, const char *service, bool serving)
{
    st_status_t st;

    if (service == NULL || strlen(service) > SRPC_MAX_SERVICE_LEN) {
        lg_error("rpc server: health service name is NULL or longer than %d bytes",
                 SRPC_MAX_SERVICE_LEN);
        return ST_ERR_INVALID;
    }
    pthread_mutex_lock(&srv->health_lock);
    st = srpc_health_put(srv, service, strlen(service), serving);
    pthread_mutex_unlock(&srv->health_lock);
    if (st != ST_OK) {
        lg_error("rpc server: too many health services service=%s limit=%d", service,
                 SRPC_MAX_HEALTH);
    }
    return st;
}

void srpc_health_set_all(srpc_server_t *srv, bool serving)
{
    pthread_mutex_lock(&srv->health_lock);
    for (size_t i = 0; i < srv->n_health; i++) {
        srv->health[i].serving = serving;
    }
    pthread_mutex_unlock(&srv->health_lock);
}

st_status_t srpc_health_handler(srpc_ctx_t *ctx, const ProtobufCMessage *req,
                                ProtobufCMessage *resp, void *arg)
{
    const Grpc__Health__V1__HealthCheckRequest *rq = (const void *)req;
    Grpc__Health__V1__HealthCheckResponse *rs = (void *)resp;
    srpc_server_t *srv = arg;
    const char *service = rq->service ? rq->service : "";
    srpc_health_entry_t *e;

    pthread_mutex_lock(&srv->health_lock);
    e = srpc_health_find(srv, service, strlen(service));
    if (e != NULL) {
        rs->status = e->serving
                         ? GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING
                         : GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING;
    }
    pthread_mutex_unlock(&srv->health_lock);
    if (e == NULL) {
        srpc_ctx_set_error(ctx, "unknown service '%.128s'", service);
        return ST_ERR_NOT_FOUND;
    }
    return ST_OK;
}
