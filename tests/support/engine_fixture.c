/* engine_fixture.c - see engine_fixture.h. */
#include "engine_fixture.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "client_fixture.h"

void ef_client_params(st_client_params_t *p, const char *nodes)
{
    cf_params_session(p, nodes, "reference-hybrid", 30000);
}

void ef_model_open(st_model_t **model_p, st_engine_t **ref_p)
{
    st_model_config_t mc;

    st_model_config_default(&mc);
    assert_int_equal(st_model_create(&mc, model_p), ST_OK);
    assert_int_equal(st_engine_create(*model_p, NULL, ref_p), ST_OK);
}

void ef_cached_params(st_engine_params_t *ep, st_client_t *client)
{
    *ep = (st_engine_params_t){0};
    ep->field_mask = ST_ENGINE_FIELD_CLIENT | ST_ENGINE_FIELD_KDA_INTERVAL;
    ep->client = client;
    ep->kda_interval = 4;
}

void ef_cached_open(st_model_t *model, const st_engine_params_t *ep, st_engine_t **cached_p)
{
    assert_int_equal(st_engine_create(model, ep, cached_p), ST_OK);
}

void ef_teardown(st_engine_t *cached, st_engine_t *ref, st_model_t *model, st_client_t *client,
                 tc_cluster_t *cl)
{
    st_engine_free(cached);
    st_engine_free(ref);
    st_model_free(model);
    st_client_close(client);
    tc_stop_all(cl);
}
