/*
 * engine_fixture.h - the set-up the engine integration tests share
 * (tests/integration/test_engine.c, test_engine_session.c): the client they
 * connect to the daemons, the reference model with an engine of it that has
 * no cluster, and the parameters of the engine that has one.
 *
 * Test code: a failure is a cmocka assertion, so these run only inside a
 * cmocka test (or its setup).
 */
#ifndef STRATA_TEST_ENGINE_FIXTURE_H
#define STRATA_TEST_ENGINE_FIXTURE_H

#include "cluster.h"
#include "strata/engine.h"
#include "strata/strata.h"

/* The parameters of the engine tests' client of nodes: tenant "acme",
 * model "reference-hybrid", health checks every 100 ms, 30 s calls. */
void ef_client_params(st_client_params_t *p, const char *nodes);

/* The reference hybrid model (default config) and an engine of it without
 * a cluster, the reference the cached engine is compared with. */
void ef_model_open(st_model_t **model_p, st_engine_t **ref_p);

/* The parameters of an engine over client with a KDA checkpoint every 4
 * blocks; callers add their own fields. */
void ef_cached_params(st_engine_params_t *ep, st_client_t *client);

/* Creates the cached engine of model with ep into *cached_p (asserted). */
void ef_cached_open(st_model_t *model, const st_engine_params_t *ep, st_engine_t **cached_p);

/* Frees what the set-up made, in reverse: both engines, the model, the
 * client, then stops the daemons. */
void ef_teardown(st_engine_t *cached, st_engine_t *ref, st_model_t *model, st_client_t *client,
                 tc_cluster_t *cl);

#endif
