/*
 * test_dataplane.h - what the two files of the test_dataplane executable
 * share (test_dataplane.c: main and the libstrata cases;
 * test_dataplane_raw.c: the protocol-level cases).
 */
#ifndef STRATA_TEST_DATAPLANE_H
#define STRATA_TEST_DATAPLANE_H

#include "cluster.h"
#include "strata/strata.h"

/* The client's transport under test (argv[2]): "ucx", "libfabric:<provider>". */
extern const char *td_spec;

/* Starts one daemon with the transport under test and "more", checked to
 * serve it (skips when this machine cannot run it). */
void td_start(tc_cluster_t *cl, const char *more);

/* A libstrata client of node 0 over the transport under test. */
st_client_t *td_connect(const tc_cluster_t *cl);

/* The protocol-level cases (test_dataplane_raw.c). */
void test_commit_checksum_abort_expiry(void **state);
void test_read_after_lease_expiry_is_a_miss(void **state);
void test_put_after_expiry_fenced(void **state);
void test_committed_not_writable(void **state);
void test_put_outlives_reservation(void **state);

/* test_dataplane_deadline.c */
void test_get_deadline_stopped_daemon(void **state);

#endif
