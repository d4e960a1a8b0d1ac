# Stream mode (sluice pull, on-first-use expert fetch, expert cache) against a
# synthetic model served by nginx on loopback, with and without a
# fault-injecting proxy (tests/remote/remote_test.sh). Labels "remote" and
# "asan" (the sanitizer tree runs them too).
find_program(SLUICE_NGINX nginx PATHS /usr/sbin /usr/local/sbin)
if(SLUICE_NGINX)
  foreach(arch deepseek_v3_fp8 kimi_k3)
    foreach(scenario full stream resume faults)
      add_test(NAME remote.${scenario}.${arch}
               COMMAND ${CMAKE_CURRENT_LIST_DIR}/remote_test.sh $<TARGET_FILE:sluice> ${scenario} ${arch})
      set_tests_properties(remote.${scenario}.${arch} PROPERTIES LABELS "remote;asan" TIMEOUT 900
                           ENVIRONMENT "SLUICE_NGINX_BIN=${SLUICE_NGINX}")
    endforeach()
  endforeach()
else()
  sluice_missing_test_tool("nginx not found (Debian package nginx-light): the remote.* stream-mode tests need it")
endif()
