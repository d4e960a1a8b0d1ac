# The newcomer's path end to end, release tree only: `cmake --install` into a
# temporary prefix and the .deb (both run the main job from another directory
# with the installed model), and the memory budget without --ram in a real
# memory cgroup (root and a writable memory cgroup: CI's machine has both).
if(NOT SLUICE_SANITIZE AND NOT SLUICE_TSAN AND NOT CMAKE_CROSSCOMPILING)
  add_test(NAME system.install COMMAND ${CMAKE_CURRENT_LIST_DIR}/install.sh ${CMAKE_BINARY_DIR} ${CMAKE_SOURCE_DIR})
  add_test(NAME system.deb COMMAND ${CMAKE_CURRENT_LIST_DIR}/deb.sh ${CMAKE_BINARY_DIR})
  set_tests_properties(system.install system.deb PROPERTIES LABELS "system" TIMEOUT 600)
  # Where this machine cannot make a memory cgroup the test fails, naming why; a machine that
  # never can leaves it out only when asked to.
  execute_process(COMMAND id -u OUTPUT_VARIABLE SLUICE_UID OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT SLUICE_UID STREQUAL "0" AND NOT SLUICE_REQUIRE_TEST_TOOLS)
    message(WARNING "not root: the system.memory_cgroup test is left out (SLUICE_REQUIRE_TEST_TOOLS=OFF)")
  else()
    add_test(NAME system.memory_cgroup COMMAND ${CMAKE_CURRENT_LIST_DIR}/memory_cgroup.sh $<TARGET_FILE:sluice>)
    set_tests_properties(system.memory_cgroup PROPERTIES LABELS "system" TIMEOUT 600)
  endif()
endif()
