# SPDX-License-Identifier: MIT
# agentd_store: the trace store writer (store*.c, see store_int.h), the InfiniBand
# poller, the per-process sync wait count (syncwait.c), and their tests.
# Included by agentd/trace.cmake (which links agentd_store into agentd); needs
# the fq_sql target (sql/) defined before it.
include_guard(GLOBAL)

set(FLEETQ_STORE_ROOT ${CMAKE_CURRENT_LIST_DIR}/..)

add_library(agentd_store STATIC
  ${CMAKE_CURRENT_LIST_DIR}/store.c
  ${CMAKE_CURRENT_LIST_DIR}/store_sql.c
  ${CMAKE_CURRENT_LIST_DIR}/store_setup.c
  ${CMAKE_CURRENT_LIST_DIR}/store_schema.c
  ${CMAKE_CURRENT_LIST_DIR}/store_ckpt.c
  ${CMAKE_CURRENT_LIST_DIR}/store_retain.c
  ${CMAKE_CURRENT_LIST_DIR}/store_roll.c
  ${CMAKE_CURRENT_LIST_DIR}/store_file.c
  ${CMAKE_CURRENT_LIST_DIR}/ib.c
  ${CMAKE_CURRENT_LIST_DIR}/syncwait.c
  ${CMAKE_CURRENT_LIST_DIR}/nvml.c
  ${CMAKE_CURRENT_LIST_DIR}/nvml_map.c
  ${CMAKE_CURRENT_LIST_DIR}/nvml_thread.c)
target_include_directories(agentd_store PUBLIC ${CMAKE_CURRENT_LIST_DIR})
target_link_libraries(agentd_store PUBLIC fq_sql PkgConfig::SQLITE3 Threads::Threads
                      ${CMAKE_DL_LIBS})

# Tests live in tests/agentd/store/ but are registered here, next to the library.
set(store_test_dir ${FLEETQ_STORE_ROOT}/tests/agentd/store)
foreach(t store ib store_diskfull syncwait store_userfile store_schema store_rows
      store_names)
  add_executable(test_agentd_${t} ${store_test_dir}/test_${t}.c)
  target_link_libraries(test_agentd_${t} PRIVATE agentd_store)
  add_test(NAME agentd_${t} COMMAND test_agentd_${t})
  # 77: the test cannot run here (e.g. not root for the tmpfs mount)
  set_tests_properties(agentd_${t} PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 120)
endforeach()
