/*
 * client_fixture.h - the libstrata set-up the integration tests share: the
 * connect parameters they repeat (a session of tenant "acme", or a client of
 * a one-sided transport), connecting with the reason of a failure, the token
 * stream most tests hash, and chains of block hashes made from tokens.
 *
 * Test code: a failure is a cmocka assertion, so these run only inside a
 * cmocka test.
 */
#ifndef STRATA_TEST_CLIENT_FIXTURE_H
#define STRATA_TEST_CLIENT_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

#include "strata/strata.h"

/* Parameters of a client of nodes with a timeout and nothing else set. */
void cf_params(st_client_params_t *p, const char *nodes, uint32_t timeout_ms);

/* cf_params plus tenant "acme", the given model and a health check every
 * 100 ms: the session most integration tests open. */
void cf_params_session(st_client_params_t *p, const char *nodes, const char *model,
                       uint32_t timeout_ms);

/* cf_params plus the one-sided transport spec (e.g. "ucx"). */
void cf_params_transport(st_client_params_t *p, const char *nodes, const char *transport,
                         uint32_t timeout_ms);

/* Connects with p; a failure fails the test with libstrata's last error. */
st_client_t *cf_connect(const st_client_params_t *p);

/* Connects with p, trying again every 100 ms (up to tries times) while the
 * answer is ST_ERR_UNAVAILABLE (daemons still starting); asserts ST_OK. */
st_client_t *cf_connect_retry(const st_client_params_t *p, int tries);

/* tok[i] = XXH3_64(i, seed stream) % 150000 for i in [from, to): the token
 * stream the tests share. */
void cf_tokens(uint32_t *tok, size_t from, size_t to, uint64_t stream);

/* A buffer for n_blocks blocks of c's tokens (malloc'd, asserted). */
uint32_t *cf_token_buf(st_client_t *c, size_t n_blocks);

/* The chain of tok (n_blocks blocks of c's tokens), asserting that every
 * block is hashed; frees tok. The chain is malloc'd. */
st_hash_t *cf_hash(st_client_t *c, uint32_t *tok, size_t n_blocks);

/* The chain of n_blocks blocks of the cf_tokens stream `stream` (malloc'd). */
st_hash_t *cf_chain(st_client_t *c, uint64_t stream, size_t n_blocks);

/* The 16-byte protocol id of session id as libstrata names and places it
 * (client/session.c: XXH3-128 of "strata-session-v1" || id). */
void cf_session_hash(const char *id, st_hash_t *out);

#endif
