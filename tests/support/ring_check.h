/*
 * ring_check.h - what the membership tests compare after each change: the
 * ring a daemon's Hello gives (its peers, sorted) and its epoch, the ring
 * the test expects (the live nodes), and a cluster on a fresh etcd
 * (tests/support/etcd_fixture.h, cluster.h).
 *
 * Test code: a failure is a cmocka assertion, so these run only inside a
 * cmocka test.
 */
#ifndef STRATA_TEST_RING_CHECK_H
#define STRATA_TEST_RING_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "cluster.h"
#include "etcd_fixture.h"

/* Sorts names[0..n) (strcmp) and joins them with commas into out[0..cap). */
void rc_join_sorted(const char **names, size_t n, char *out, size_t cap);

/* Hello to the daemon at addr: its ring's peers, sorted, into ring[0..cap); returns its ring_epoch. */
uint64_t rc_hello_ring(const char *addr, char *ring, size_t cap);

/* The addresses of c's nodes i with live[i], sorted, into ring[0..cap). */
void rc_live_ring(const tc_cluster_t *c, const int *live, char *ring, size_t cap);

/*
 * Starts etcd (et_start) and n daemons registered there with a lease of
 * ttl_s seconds, and marks them live[0..n). Exits 77 (the test skips) when
 * no etcd-server is installed; a failure otherwise.
 */
void rc_start_etcd_cluster(et_etcd_t *etcd, tc_cluster_t *c, const char *stratad, int n, int ttl_s,
                           int *live);

#endif
