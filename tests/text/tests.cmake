# Text suite: tokenizers and chat templates against reference implementations
# run under node (tests/node, installed by scripts/setup.sh), plus spec tests.
file(GLOB SLUICE_TEXT_TESTS CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/*.cpp)
add_executable(sluice_text_tests ${SLUICE_TEXT_TESTS} ${CMAKE_CURRENT_LIST_DIR}/../support/test_support.cpp)
target_include_directories(sluice_text_tests PRIVATE ${CMAKE_CURRENT_LIST_DIR}/..)
target_link_libraries(sluice_text_tests PRIVATE sluice_core GTest::gtest GTest::gtest_main)
target_compile_definitions(sluice_text_tests PRIVATE
  SLUICE_FIXTURES="${CMAKE_CURRENT_LIST_DIR}/../fixtures"
  SLUICE_SOURCE_DIR="${CMAKE_SOURCE_DIR}"
  SLUICE_BINARY="$<TARGET_FILE:sluice>")
add_dependencies(sluice_text_tests sluice)
gtest_discover_tests(sluice_text_tests DISCOVERY_TIMEOUT 60 PROPERTIES LABELS text TIMEOUT 300)
