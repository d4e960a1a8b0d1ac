# CUDA backend tests (label `cuda`): need a GPU. Without one the binary exits 77
# and CTest reports the tests skipped; scripts/test-gpu.sh sets
# SLUICE_REQUIRE_GPU=1 so they fail there instead. scripts/test.sh leaves them out.
if(SLUICE_CUDA)
  add_executable(sluice_cuda_tests ${CMAKE_CURRENT_LIST_DIR}/cuda_backend_test.cpp ${CMAKE_CURRENT_LIST_DIR}/../support/test_support.cpp)
  target_include_directories(sluice_cuda_tests PRIVATE ${CMAKE_CURRENT_LIST_DIR}/..)
  target_link_libraries(sluice_cuda_tests PRIVATE sluice_core GTest::gtest)
  target_compile_definitions(sluice_cuda_tests PRIVATE
    SLUICE_FIXTURES="${CMAKE_CURRENT_LIST_DIR}/../fixtures"
    SLUICE_BINARY="$<TARGET_FILE:sluice>"
    # the tensor-core products were built for sm_90a (their wgmma kernel must run on a Hopper GPU)
    $<$<TARGET_EXISTS:sluice_cuda_tc>:SLUICE_CUDA_SM90A=1>)
  add_dependencies(sluice_cuda_tests sluice)
  gtest_discover_tests(sluice_cuda_tests DISCOVERY_TIMEOUT 60 PROPERTIES LABELS cuda SKIP_RETURN_CODE 77)
endif()
