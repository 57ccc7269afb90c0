/*
 * methods.c - the method tables of strata.v1.Cache and grpc.health.v1.Health.
 * test_rpc checks this table against the service descriptor that protoc-c
 * generates, so the two cannot drift apart.
 */
#include "srpc.h"

#include "health.pb-c.h"
#include "strata.pb-c.h"

#define SRPC_CACHE(id, name, req, resp)                                              \
    [SRPC_CACHE_##id] = {"/strata.v1.Cache/" name, &strata__v1__##req##__descriptor, \
                         &strata__v1__##resp##__descriptor}

const srpc_method_t srpc_cache_methods[SRPC_CACHE_N_METHODS] = {
    SRPC_CACHE(HELLO, "Hello", hello_request, hello_response),
    SRPC_CACHE(LOOKUP, "Lookup", lookup_request, lookup_response),
    SRPC_CACHE(LOCATE, "Locate", locate_request, locate_response),
    SRPC_CACHE(RESERVE, "Reserve", reserve_request, reserve_response),
    SRPC_CACHE(COMMIT, "Commit", commit_request, commit_response),
    SRPC_CACHE(ABORT, "Abort", abort_request, abort_response),
    SRPC_CACHE(RELEASE, "Release", release_request, release_response),
    SRPC_CACHE(PUT, "Put", put_request, put_response),
    SRPC_CACHE(GET, "Get", get_request, get_response),
    SRPC_CACHE(DELETE, "Delete", delete_request, delete_response),
    SRPC_CACHE(PIN, "Pin", pin_request, pin_response),
    SRPC_CACHE(UNPIN, "Unpin", unpin_request, unpin_response),
    SRPC_CACHE(OPEN_SESSION, "OpenSession", open_session_request, session_response),
    SRPC_CACHE(APPEND_SESSION, "AppendSession", append_session_request, session_response),
    SRPC_CACHE(GET_SESSION, "GetSession", get_session_request, session_response),
    SRPC_CACHE(CLOSE_SESSION, "CloseSession", close_session_request, close_session_response),
    SRPC_CACHE(STATS, "Stats", stats_request, stats_response),
    SRPC_CACHE(CLUSTER_LOOKUP, "ClusterLookup", cluster_lookup_request, cluster_lookup_response),
    SRPC_CACHE(SCORE, "Score", score_request, score_response),
    SRPC_CACHE(REPLICATE, "Replicate", replicate_request, replicate_response),
    SRPC_CACHE(DRAIN, "Drain", drain_request, drain_response),
};

const srpc_method_t srpc_health_check_method = {
    "/grpc.health.v1.Health/Check",
    &grpc__health__v1__health_check_request__descriptor,
    &grpc__health__v1__health_check_response__descriptor,
};
