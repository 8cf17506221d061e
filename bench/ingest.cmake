# SPDX-License-Identifier: MIT
# bench_ingest: trace store ingest vs a raw SQLite bulk insert of the same rows.
# Run: build/bench/bench_ingest [rows] [dir]. Not part of ctest.
if(TARGET agentd_store)
  add_executable(bench_ingest ${CMAKE_CURRENT_LIST_DIR}/bench_ingest.c)
  target_link_libraries(bench_ingest PRIVATE agentd_store)
endif()
