/*
 * fault.h - faults planted in stratad for the tests that must see a checker
 * fail (docs/testing.md, "The planted fault").
 *
 * Only a build configured with STRATA_FAULT_INJECT (the default of Debug
 * builds, never of Release ones) has them; there the environment variable
 * STRATA_FAULT names the faults armed, comma separated. Without the option
 * cd_fault_armed() is the constant 0 and no fault code is compiled.
 *
 * Faults:
 *   stale-session  AppendSession is acknowledged, and the record's version
 *                  advances, but its head and length stay as they were:
 *                  the node serves a stale copy of every session it holds.
 *   rebalance-stall the rebalancer sends nothing: every chunk of a pass stays
 *                  pending (retried, never done), so old copies stay where
 *                  they are and the new replicas hold none: the window a
 *                  reader meets while objects move, held open
 *                  (test_rebalance's test_read_during_pass).
 */
#ifndef STRATA_CACHED_FAULT_H
#define STRATA_CACHED_FAULT_H

#ifdef STRATA_FAULT_INJECT
/* Whether fault name is armed. Thread-safe; reads STRATA_FAULT once. */
int cd_fault_armed(const char *name);
/* Logs (warn) the faults armed, if any: stratad calls it at start. */
void cd_fault_announce(void);
#else
static inline int cd_fault_armed(const char *name)
{
    (void)name;
    return 0;
}
static inline void cd_fault_announce(void)
{
}
#endif

#endif
