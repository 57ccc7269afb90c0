# strata_include_modules(): includes <module>.cmake from the current source
# folder for each module that exists (its library is a target), so that tests/
# and bench/ register what a module needs only once it is built. A macro: the
# included files set variables in the caller's scope.
macro(strata_include_modules)
  foreach(mod kernels transport rpc metrics ssd cached client engine)
    set(mod_lib strata_${mod})
    if(mod STREQUAL "cached")
      set(mod_lib strata_daemon) # cached/: the daemon over its storage core (strata_core)
    endif()
    if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/${mod}.cmake AND TARGET ${mod_lib})
      include(${CMAKE_CURRENT_SOURCE_DIR}/${mod}.cmake)
    endif()
  endforeach()
endmacro()
