# The chat page `sluice serve` answers GET / with, in a real browser: Debian's
# chromium, headless, driven by playwright-core (pinned in tests/node), on the
# shipped model. Release tree only (label "server"): the page is not C++.
find_program(NODE_EXECUTABLE node)
find_program(SLUICE_CHROMIUM chromium)
set(SLUICE_NODE_MODULES ${CMAKE_CURRENT_LIST_DIR}/../node/node_modules)
set(SLUICE_K3_MINI ${CMAKE_CURRENT_LIST_DIR}/../../models/sluice-k3-mini)
if(NOT SLUICE_CHROMIUM)
  sluice_missing_test_tool("chromium not found: the server.chat_page test needs it")
endif()
if(NOT EXISTS ${SLUICE_NODE_MODULES}/playwright-core)
  sluice_missing_test_tool("npm module playwright-core missing in tests/node (npm ci there): server.chat_page needs it")
endif()
if(NODE_EXECUTABLE AND SLUICE_CHROMIUM AND EXISTS ${SLUICE_NODE_MODULES}/playwright-core
   AND EXISTS ${SLUICE_K3_MINI}/tokenizer.json)
  add_test(NAME server.chat_page
           COMMAND ${NODE_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/chat_page.mjs $<TARGET_FILE:sluice> ${SLUICE_K3_MINI}
                   ${SLUICE_CHROMIUM})
  set_tests_properties(server.chat_page PROPERTIES LABELS "server" TIMEOUT 600)
endif()
