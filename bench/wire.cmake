# SPDX-License-Identifier: MIT
# bench_wire: encode/decode rate of ROWS frames against baselines in the same run.
add_executable(bench_wire ${CMAKE_CURRENT_LIST_DIR}/bench_wire.c)
target_link_libraries(bench_wire PRIVATE fq_wire PkgConfig::MSGPACK)
