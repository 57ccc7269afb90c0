# Multi-host tests (issue #23): daemons in network namespaces joined by veth
# pairs, the data plane over TCP, a randomized fault schedule checked by the
# history checker (tests/multihost/, docs/testing.md). Root only: they skip
# with a message elsewhere. STRATA_SOAK_S lengthens the schedule.
set(STRATA_MH ${CMAKE_CURRENT_SOURCE_DIR}/multihost)
set(STRATA_MH_ARGS --stratad $<TARGET_FILE:stratad> --lib $<TARGET_FILE:strata>)
if(NOT STRATA_SANITIZE)
  # Five minutes of faults over UCX tcp: the CI schedule (a new seed each run,
  # printed with the command that replays it).
  add_test(NAME test_netns_faults
           COMMAND ${STRATA_PYTHON} ${STRATA_MH}/test_netns_faults.py ${STRATA_MH_ARGS}
                   --seconds 300)
  set_tests_properties(test_netns_faults PROPERTIES LABELS "multihost;integration"
                       TIMEOUT 900 SKIP_RETURN_CODE 77 RUN_SERIAL TRUE)
  # The same schedule, shorter, with membership on etcd (etcd-server in a
  # namespace of its own, the etcd-restart fault, the ring epochs compared):
  # about 2.5 minutes in all.
  add_test(NAME test_netns_faults_etcd
           COMMAND ${STRATA_PYTHON} ${STRATA_MH}/test_netns_faults.py ${STRATA_MH_ARGS}
                   --seconds 120 --etcd)
  set_tests_properties(test_netns_faults_etcd PROPERTIES
                       LABELS "multihost;integration;membership" TIMEOUT 600
                       SKIP_RETURN_CODE 77 RUN_SERIAL TRUE)
endif()
# The checker must catch a planted fault: daemon n0 acknowledges session
# appends but keeps serving the old record (cached/fault.h, a build with
# STRATA_FAULT_INJECT: Debug builds); the test passes only if the checker
# FAILS on that history, and skips in a build without the fault.
if(STRATA_FAULT_INJECT)
  set(STRATA_MH_FI ON)
else()
  set(STRATA_MH_FI OFF)
endif()
add_test(NAME test_netns_stale_plant
         COMMAND ${STRATA_PYTHON} ${STRATA_MH}/test_netns_faults.py ${STRATA_MH_ARGS}
                 --seconds 30 --plant stale-session --fault-inject ${STRATA_MH_FI})
set_tests_properties(test_netns_stale_plant PROPERTIES LABELS "multihost;integration"
                     TIMEOUT 300 SKIP_RETURN_CODE 77 RUN_SERIAL TRUE)
if(STRATA_SANITIZE)
  # The workload loads the sanitized libstrata into a plain python: ASan's
  # runtime preloaded there only (the test adds it to the workload's
  # environment, not to the daemons').
  set_tests_properties(test_netns_stale_plant PROPERTIES ENVIRONMENT
                       "STRATA_MH_PRELOAD=${STRATA_LIBASAN}")
endif()
