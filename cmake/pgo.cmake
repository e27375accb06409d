# Profile-guided optimisation of the proxy (GCC). scripts/pgo.sh builds the proxy with
# IDEMPROXY_PGO=generate, runs it under a training load (pass-through, fresh keys,
# replays, HTTP/2) and builds again with IDEMPROXY_PGO=use on that profile: GCC then
# lays out branches, inlines and unrolls by the counts the load gave (what that saves:
# docs/BUILD.md, "A profile-guided build").
#
# Only the project's libraries and the proxy take it (idemproxy_pgo); the tests'
# own sources do not, so a new profile recompiles the proxy and nothing else.
#   IDEMPROXY_PGO      "" (off), generate or use
#   IDEMPROXY_PGO_DIR  where the profile is written (generate) or read (use)
#   IDEMPROXY_PGO_ID   use: the profile's digest (scripts/pgo.sh). It goes on the
#                      command line, so a new profile recompiles what it covers and
#                      ccache never returns an object optimised for another one; the
#                      proxy names it when it starts.
# Object paths are kept relative to the build tree (-fprofile-prefix-path), so the
# profile's files do not name it; the profile applies to the tree that recorded it
# (scripts/pgo.sh says why).
# A function changed since the profile was recorded is compiled without it
# (-Wno-coverage-mismatch); one the load never ran is optimised as usual
# (-fprofile-partial-training). -fprofile-correction keeps an edited source building:
# without it a call into a function whose counts no longer match stopped the build
# under -Werror ("Missing counts for called function", which no -Wno- option names),
# and it smooths counters that several threads updated.
set(IDEMPROXY_PGO "" CACHE STRING "Profile-guided optimisation: empty, generate or use")
set(IDEMPROXY_PGO_DIR "" CACHE PATH "The profile's directory (IDEMPROXY_PGO)")
set(IDEMPROXY_PGO_ID "" CACHE STRING "The profile's digest (IDEMPROXY_PGO=use)")
set(IDEMPROXY_PGO_FLAGS "")
if(IDEMPROXY_PGO)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    message(FATAL_ERROR "IDEMPROXY_PGO needs GCC (its profile format), not ${CMAKE_CXX_COMPILER_ID}")
  endif()
  if(NOT IDEMPROXY_PGO_DIR)
    message(FATAL_ERROR "IDEMPROXY_PGO=${IDEMPROXY_PGO} needs IDEMPROXY_PGO_DIR")
  endif()
  if(IDEMPROXY_PGO STREQUAL "generate")
    # Atomic counters: the proxy's I/O threads and the store's runners update them.
    set(IDEMPROXY_PGO_FLAGS -fprofile-generate=${IDEMPROXY_PGO_DIR}
        -fprofile-update=prefer-atomic -fprofile-prefix-path=${CMAKE_BINARY_DIR})
    # Every executable links libgcov, since any may link an instrumented library.
    add_link_options(-fprofile-generate=${IDEMPROXY_PGO_DIR})
  elseif(IDEMPROXY_PGO STREQUAL "use")
    if(NOT IDEMPROXY_PGO_ID)
      message(FATAL_ERROR "IDEMPROXY_PGO=use needs IDEMPROXY_PGO_ID (scripts/pgo.sh sets it)")
    endif()
    set(IDEMPROXY_PGO_FLAGS -fprofile-use=${IDEMPROXY_PGO_DIR} -fprofile-partial-training
        -fprofile-prefix-path=${CMAKE_BINARY_DIR} -fprofile-correction -Wno-missing-profile
        -Wno-coverage-mismatch)
  else()
    message(FATAL_ERROR "IDEMPROXY_PGO is empty, generate or use, not '${IDEMPROXY_PGO}'")
  endif()
endif()

# idemproxy_pgo(TARGET): TARGET's sources compiled for the profile (IDEMPROXY_PGO).
function(idemproxy_pgo target)
  if(IDEMPROXY_PGO_FLAGS)
    target_compile_options(${target} PRIVATE ${IDEMPROXY_PGO_FLAGS})
  endif()
  if(IDEMPROXY_PGO STREQUAL "use")
    # The proxy names its profile in its first log line (src/cli/serve.cpp).
    target_compile_definitions(${target} PRIVATE IDEMPROXY_PGO_ID="${IDEMPROXY_PGO_ID}")
  endif()
endfunction()
