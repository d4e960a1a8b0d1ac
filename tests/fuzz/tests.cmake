# Fuzz targets (tests/fuzz/*_fuzz.cpp): built in every tree; in the sanitizer
# tree each runs for a few seconds over its seed corpus (label "asan").
file(GLOB SLUICE_FUZZ_TARGETS CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/*_fuzz.cpp)
set(SLUICE_FUZZ_SECONDS 8 CACHE STRING "Seconds each fuzz target runs in the sanitizer test suite")
foreach(src ${SLUICE_FUZZ_TARGETS})
  get_filename_component(name ${src} NAME_WE)
  add_executable(${name} ${src} ${CMAKE_CURRENT_LIST_DIR}/fuzz_driver.cpp)
  target_link_libraries(${name} PRIVATE sluice_core)
  if(SLUICE_SANITIZE)
    string(REGEX REPLACE "_fuzz$" "" corpus ${name})
    add_test(NAME fuzz.${name}
             COMMAND ${name} ${CMAKE_CURRENT_LIST_DIR}/corpus/${corpus} ${SLUICE_FUZZ_SECONDS})
    set_tests_properties(fuzz.${name} PROPERTIES LABELS asan)
  endif()
endforeach()
