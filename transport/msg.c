/*
 * msg.c - the transport's small messages (active messages in UCX): the queue
 * of received ones, handed to the listener from progress, and send and reply.
 */
#include <stdlib.h>

#include "stt_internal.h"

st_status_t tp_msg_listen(tp_transport_t *tp, tp_msg_fn fn, void *arg)
{
    if (tp->ops->msg_send == NULL) {
        return ST_ERR_UNSUPPORTED;
    }
    tp->msg_fn = fn;
    tp->msg_arg = arg;
    return ST_OK;
}

static st_status_t stt_msg_check(const tp_transport_t *tp, size_t len)
{
    if (tp->ops->msg_send == NULL) {
        return ST_ERR_UNSUPPORTED;
    }
    if (len == 0 || len > TP_MSG_MAX) {
        lg_error("transport message refused backend=%s: bytes=%zu (1..%u)", tp->ops->name, len,
                 TP_MSG_MAX);
        return ST_ERR_INVALID;
    }
    return ST_OK;
}

st_status_t tp_msg_send(tp_ep_t *ep, const void *data, size_t len)
{
    tp_transport_t *tp = ep->tp;
    st_status_t st = stt_msg_check(tp, len);
    if (st != ST_OK) {
        return st;
    }
    if (ep->closing) {
        return ST_ERR_CANCELLED;
    }
    if (ep->error != ST_OK) {
        return ep->error;
    }
    return tp->ops->msg_send(tp, ep, NULL, data, len);
}

void tp_msg_keep(tp_msg_t *msg)
{
    msg->kept = true;
}

const void *tp_msg_data(const tp_msg_t *msg)
{
    return msg->data;
}

size_t tp_msg_len(const tp_msg_t *msg)
{
    return msg->len;
}

void tp_msg_free(tp_msg_t *msg)
{
    free(msg);
}

st_status_t tp_msg_reply(tp_msg_t *msg, const void *data, size_t len)
{
    st_status_t st = stt_msg_check(msg->tp, len);
    if (st != ST_OK) {
        return st;
    }
    if (msg->route == NULL) {
        /* The peer's doing (strata's senders always offer a route), and one
         * line per message would let a peer flood the log. */
        lg_warn_ratelimited("transport reply refused backend=%s: the message carries no reply "
                            "route",
                            msg->tp->ops->name);
        return ST_ERR_INVALID;
    }
    return msg->tp->ops->msg_send(msg->tp, NULL, msg->route, data, len);
}

void stt_msg_received(tp_transport_t *tp, tp_msg_t *m)
{
    m->tp = tp;
    stt_list_push(&tp->msgs, &m->link);
}

int stt_msg_drain(tp_transport_t *tp)
{
    int n = 0;
    if (tp->msg_draining) {
        return 0;
    }
    tp->msg_draining = true;
    while (!stt_list_empty(&tp->msgs)) {
        tp_msg_t *m = stt_container_of(tp->msgs.next, tp_msg_t, link);
        stt_list_del(&m->link);
        n++;
        m->kept = false;
        if (tp->msg_fn != NULL) {
            tp->msg_fn(tp->msg_arg, m, m->data, m->len);
        } else {
            lg_debug("transport message dropped: nobody listens bytes=%zu", m->len);
        }
        if (!m->kept) {
            free(m);
        }
    }
    tp->msg_draining = false;
    return n;
}
