/*
 * ns_probe.h - the pieces of a cross-tenant probe (tests/integration/
 * test_tenancy.c, tests/fuzz/fuzz_handlers.c): a request body that is only
 * a namespace id, sent raw to any method, and an error message with that id
 * taken out, so that the answer on another tenant's namespace can be
 * compared by shape with the answer on a namespace that does not exist.
 */
#ifndef STRATA_TEST_NS_PROBE_H
#define STRATA_TEST_NS_PROBE_H

#include <stddef.h>
#include <stdint.h>

/* Writes a request that is only field 1 (namespace_id = ns), as every
 * method but Hello has, into buf (at least 11 bytes); returns its length. */
size_t np_ns_only(uint64_t ns, uint8_t *buf);

/* Replaces every decimal n in s by "N", so that two messages compare by shape. */
void np_shape(char *s, uint64_t n);

#endif
