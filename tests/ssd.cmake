# The SSD tier (cached/ssd): real LMDB files in temporary directories.
strata_add_test(test_ssd SOURCES unit/test_ssd.c unit/test_ssd_env.c
                LIBS strata_ssd PkgConfig::CMOCKA PkgConfig::XXHASH PkgConfig::LMDB
                LABELS unit ssd
                TIMEOUT 120)

# kill -9 at random points in a stream of durable writes, twenty times.
add_executable(ssd_crash_writer fault/ssd_crash_writer.c)
target_link_libraries(ssd_crash_writer PRIVATE strata_ssd PkgConfig::XXHASH)
add_test(NAME test_ssd_crash
         COMMAND ${STRATA_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/fault/test_ssd_crash.py
                 --writer $<TARGET_FILE:ssd_crash_writer> --runs 20)
set_tests_properties(test_ssd_crash PROPERTIES LABELS "fault;ssd" TIMEOUT 180)

# stratad's tier glue (cached/tier*.c) under the daemon: the daemon's values in
# the tier, and recovery through the namespace resolver into a real store.
strata_add_test(test_tier SOURCES unit/test_tier.c
                LIBS strata_daemon PkgConfig::CMOCKA
                LABELS unit ssd cached
                TIMEOUT 60)
