# Fuzz targets (tests/fuzz/*_fuzz.cpp, written against libFuzzer's API), each
# with a seed corpus in tests/fuzz/corpus/<target without _fuzz>:
# - the sanitizer tree built with clang and -DSLUICE_FUZZ=ON (CI's): linked with libFuzzer and run
#   coverage-guided for SLUICE_FUZZ_SECONDS each (label "fuzz") from the seed SLUICE_FUZZ_SEED, which
#   scripts/test.sh derives from the commit: every CI run of a new commit tries new inputs, and the
#   same commit (or the printed seed) repeats them. New inputs go to the build tree, crashes to
#   fuzz-<target>-crash-*. Longer hunts for new bugs are scripts/fuzz.sh's
#   job (random seeds, minutes per target), run before landing a change to a parser;
# - a sanitizer tree without SLUICE_FUZZ (g++): linked with fuzz_driver.cpp, run over the seed corpus
#   and a fixed count of random mutations from a fixed seed (label "asan");
# - the release tree: built only.
file(GLOB SLUICE_FUZZ_TARGETS CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/*_fuzz.cpp)
set(SLUICE_FUZZ_SECONDS 20 CACHE STRING "Seconds each target is fuzzed in the fuzz tree")
set(SLUICE_FUZZ_SEED 1 CACHE STRING "libFuzzer -seed in the fuzz tree (scripts/test.sh sets it from the commit; 0: random)")
set(SLUICE_FUZZ_DRIVER_SECONDS 20 CACHE STRING "At most this many seconds of random mutations per target in the sanitizer tree")
# A fixed seed (1) and input count there: a reproducible regression check in CI, not a lottery.
set(SLUICE_FUZZ_DRIVER_INPUTS 1000 CACHE STRING "Random mutations per target in the sanitizer tree")
add_custom_target(fuzz_targets)
foreach(src ${SLUICE_FUZZ_TARGETS})
  get_filename_component(name ${src} NAME_WE)
  string(REGEX REPLACE "_fuzz$" "" corpus ${name})
  set(seeds ${CMAKE_CURRENT_LIST_DIR}/corpus/${corpus})
  if(NOT IS_DIRECTORY ${seeds})
    message(FATAL_ERROR "fuzz target ${name} has no seed corpus ${seeds}")
  endif()
  if(SLUICE_FUZZ)
    add_executable(${name} ${src})
    target_compile_options(${name} PRIVATE -fsanitize=fuzzer-no-link)
    target_link_options(${name} PRIVATE -fsanitize=fuzzer)
  else()
    add_executable(${name} ${src} ${CMAKE_CURRENT_LIST_DIR}/fuzz_driver.cpp)
  endif()
  target_link_libraries(${name} PRIVATE sluice_serve)
  target_include_directories(${name} PRIVATE ${CMAKE_CURRENT_LIST_DIR})
  target_compile_definitions(${name} PRIVATE SLUICE_FIXTURES="${CMAKE_CURRENT_LIST_DIR}/../fixtures")
  add_dependencies(fuzz_targets ${name})
  if(SLUICE_FUZZ)
    set(work ${CMAKE_CURRENT_BINARY_DIR}/fuzz-corpus/${corpus})
    file(MAKE_DIRECTORY ${work})
    add_test(NAME fuzz.${name}
             COMMAND ${name} -seed=${SLUICE_FUZZ_SEED} -max_total_time=${SLUICE_FUZZ_SECONDS} -timeout=25 -rss_limit_mb=4096 -print_final_stats=1
                     -artifact_prefix=${CMAKE_CURRENT_BINARY_DIR}/fuzz-${corpus}- ${work} ${seeds})
    math(EXPR limit "${SLUICE_FUZZ_SECONDS} * 3 + 120")
    set_tests_properties(fuzz.${name} PROPERTIES LABELS fuzz TIMEOUT ${limit})
  elseif(SLUICE_SANITIZE)
    add_test(NAME fuzz.${name} COMMAND ${name} ${seeds} ${SLUICE_FUZZ_DRIVER_SECONDS} 1 ${SLUICE_FUZZ_DRIVER_INPUTS})
    set_tests_properties(fuzz.${name} PROPERTIES LABELS asan)
  endif()
endforeach()
