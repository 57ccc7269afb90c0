# The data-plane transport over real transports on loopback, two processes
# each (see tests/unit/test_transport.c). One executable, registered once per
# backend and path; a path that this machine does not offer skips (77).
strata_add_test(test_transport_ucx_shm SOURCES unit/test_transport.c unit/test_transport_target.c
                support/fd_io.c
                LIBS strata_transport strata_common PkgConfig::XXHASH PkgConfig::CMOCKA
                ARGS ucx "sm,self" LABELS unit transport TIMEOUT 120)
target_include_directories(test_transport_ucx_shm PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/support)

# strata_transport_test(<name> <args...>): the same executable, another path.
# A libfabric provider name holds a ';' ("tcp;ofi_rxm"), which a CMake list
# would split: write it with '+' here, it is turned back into ';'.
function(strata_transport_test name)
  set(args)
  foreach(arg ${ARGN})
    string(REPLACE "+" "\\;" arg "${arg}")
    string(APPEND args " ${arg}")
  endforeach()
  cmake_language(EVAL CODE "add_test(NAME ${name} COMMAND test_transport_ucx_shm ${args})")
  set_tests_properties(${name} PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77
                       LABELS "unit;transport")
endfunction()

strata_transport_test(test_transport_ucx_tcp ucx "tcp,self")
# Peer failure detection is off by default on one host; force it on here so
# that UCX's error-handling path is exercised too.
# An operator's UCX_TCP_TX_SEG_SIZE wins over strata's default (test_ucx_defaults).
strata_transport_test(test_transport_ucx_tcp_env ucx "tcp,self")
set_tests_properties(test_transport_ucx_tcp_env PROPERTIES ENVIRONMENT "UCX_TCP_TX_SEG_SIZE=64K")
strata_transport_test(test_transport_ucx_tcp_peerfail ucx "tcp,self" peer-failure)
strata_transport_test(test_transport_fabric_tcp libfabric "tcp+ofi_rxm" lo)
strata_transport_test(test_transport_fabric_shm libfabric shm)
