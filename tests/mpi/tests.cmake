# Expert parallelism over MPI: for every architecture's golden model, 3 ranks
# on this machine (mpirun --oversubscribe) write the same logits bit for bit
# and generate the same tokens as one process, each rank computing only its
# share of the routed experts (tests/mpi/sharded_test.py); mpi.netns.* the same
# with each rank in its own network namespace (TCP over veth links).
if(NOT CMAKE_CROSSCOMPILING AND NOT SLUICE_SANITIZE AND NOT SLUICE_TSAN)
  if(NOT SLUICE_MPI AND MPI_CXX_FOUND)
    message(STATUS "SLUICE_MPI=OFF: the mpi.* tests are left out")
  elseif(NOT SLUICE_MPI)
    sluice_missing_test_tool("no MPI found (libopenmpi-dev, openmpi-bin): the mpi.* tests need it")
  else()
    set(SLUICE_MPI_MODELS deepseek_v3_tiny deepseek_v3_tiny_fp8 deepseek_v3_tiny_int4 qwen3_moe_tiny gpt_oss_tiny
        gpt_oss_clamp kimi_linear_tiny kimi_k3_tiny kimi_k3_situ)
    foreach(name ${SLUICE_MPI_MODELS})
      set(dir ${CMAKE_SOURCE_DIR}/tests/fixtures/golden/${name})
      add_test(NAME mpi.${name} COMMAND python3 ${CMAKE_CURRENT_LIST_DIR}/sharded_test.py $<TARGET_FILE:sluice>
               ${SLUICE_MPIEXEC} ${dir} ${dir}/reference.safetensors 3)
    endforeach()
    add_test(NAME mpi.sluice_k3_mini COMMAND python3 ${CMAKE_CURRENT_LIST_DIR}/sharded_test.py $<TARGET_FILE:sluice>
             ${SLUICE_MPIEXEC} ${CMAKE_SOURCE_DIR}/models/sluice-k3-mini
             ${CMAKE_SOURCE_DIR}/tests/fixtures/golden/sluice_k3_mini_reference.safetensors 3)
    # A rank killed mid-run ends the job with an error naming it (no rank left waiting).
    add_test(NAME mpi.lost_rank COMMAND python3 ${CMAKE_CURRENT_LIST_DIR}/lost_rank_test.py $<TARGET_FILE:sluice>
             ${SLUICE_MPIEXEC} ${CMAKE_SOURCE_DIR}/tests/fixtures/golden/qwen3_moe_tiny)
    # bench --batch under mpirun: the same routes as one process, and where the passes' time went
    # (routed experts, exchange; the fastest and the slowest rank), which bench/netns_model.py reads.
    add_test(NAME mpi.bench_timers COMMAND python3 ${CMAKE_CURRENT_LIST_DIR}/bench_timers_test.py $<TARGET_FILE:sluice>
             ${SLUICE_MPIEXEC} ${CMAKE_SOURCE_DIR}/tests/fixtures/golden/deepseek_v3_tiny 3)
    # serve and chat under mpirun: rank 0 serves or reads the terminal, the others follow its sessions.
    set(golden ${CMAKE_SOURCE_DIR}/tests/fixtures/golden)
    add_test(NAME mpi.serve COMMAND python3 ${CMAKE_CURRENT_LIST_DIR}/serve_test.py $<TARGET_FILE:sluice>
             ${SLUICE_MPIEXEC} ${golden}/qwen3_moe_tiny 3)
    add_test(NAME mpi.chat COMMAND python3 ${CMAKE_CURRENT_LIST_DIR}/chat_test.py $<TARGET_FILE:sluice>
             ${SLUICE_MPIEXEC} ${CMAKE_SOURCE_DIR}/models/sluice-k3-mini 3)
    # A rank killed while serving: an error naming it and /health saying why (not a hung server).
    add_test(NAME mpi.serve_lost_rank COMMAND python3 ${CMAKE_CURRENT_LIST_DIR}/serve_lost_rank_test.py
             $<TARGET_FILE:sluice> ${SLUICE_MPIEXEC} ${golden}/qwen3_moe_tiny)
    # The same between "hosts": each rank in its own network namespace, the ranks joined by veth
    # links and talking TCP over them (scripts/netns-ranks.sh), logits decoded token by token and
    # generated tokens bit for bit one process's; a rank killed mid-run still ends the job with the
    # error. Namespaces need root and iproute2.
    find_program(SLUICE_IP ip PATHS /usr/sbin /sbin)
    execute_process(COMMAND id -u OUTPUT_VARIABLE SLUICE_UID OUTPUT_STRIP_TRAILING_WHITESPACE)
    set(netns_tests)
    if(NOT SLUICE_IP)
      sluice_missing_test_tool("no ip (iproute2): the mpi.netns.* tests need it")
    elseif(NOT SLUICE_UID STREQUAL "0")
      sluice_missing_test_tool("not root: the mpi.netns.* tests create network namespaces")
    else()
      set(netns ${CMAKE_SOURCE_DIR}/scripts/netns-ranks.sh)
      foreach(name ${SLUICE_MPI_MODELS})
        set(dir ${CMAKE_SOURCE_DIR}/tests/fixtures/golden/${name})
        add_test(NAME mpi.netns.${name} COMMAND python3 ${CMAKE_CURRENT_LIST_DIR}/netns_test.py $<TARGET_FILE:sluice>
                 ${SLUICE_MPIEXEC} ${netns} ${dir} ${dir}/reference.safetensors 3)
        list(APPEND netns_tests mpi.netns.${name})
      endforeach()
      add_test(NAME mpi.netns.sluice_k3_mini COMMAND python3 ${CMAKE_CURRENT_LIST_DIR}/netns_test.py
               $<TARGET_FILE:sluice> ${SLUICE_MPIEXEC} ${netns} ${CMAKE_SOURCE_DIR}/models/sluice-k3-mini
               ${CMAKE_SOURCE_DIR}/tests/fixtures/golden/sluice_k3_mini_reference.safetensors 3)
      list(APPEND netns_tests mpi.netns.sluice_k3_mini)
      add_test(NAME mpi.netns.lost_rank COMMAND python3 ${CMAKE_CURRENT_LIST_DIR}/lost_rank_test.py
               $<TARGET_FILE:sluice> ${SLUICE_MPIEXEC} ${CMAKE_SOURCE_DIR}/tests/fixtures/golden/qwen3_moe_tiny ${netns})
      list(APPEND netns_tests mpi.netns.lost_rank)
      set_tests_properties(${netns_tests} PROPERTIES LABELS "mpi;netns" TIMEOUT 600 PROCESSORS 2)
    endif()
    list(TRANSFORM SLUICE_MPI_MODELS PREPEND mpi.)
    # Three ranks each: two such tests at once on CI's two cores.
    set_tests_properties(${SLUICE_MPI_MODELS} mpi.sluice_k3_mini mpi.lost_rank mpi.bench_timers mpi.serve mpi.chat
                         mpi.serve_lost_rank PROPERTIES LABELS mpi TIMEOUT 600
                         PROCESSORS 2)
  endif()
endif()
