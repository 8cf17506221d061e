# SPDX-License-Identifier: MIT
# agentd_trace: the eBPF tracer (trace*.c, see trace_int.h), discovery and probe tables, on top of the store.
# Included by agentd/CMakeLists.txt; tests in tests/trace/.
include_guard(GLOBAL)

if(EXISTS ${CMAKE_CURRENT_LIST_DIR}/store.cmake)
  include(${CMAKE_CURRENT_LIST_DIR}/store.cmake)
endif()

if(FLEETQ_BPF)
  pkg_check_modules(LIBBPF REQUIRED IMPORTED_TARGET libbpf)
  pkg_check_modules(LIBELF REQUIRED IMPORTED_TARGET libelf)
  pkg_check_modules(ZLIB REQUIRED IMPORTED_TARGET zlib)
  # fleetq_bpf / fleetq_bpf_skels come from bpf/, which the top level adds after agentd/
  add_library(agentd_trace STATIC
    ${CMAKE_CURRENT_LIST_DIR}/trace.c
    ${CMAKE_CURRENT_LIST_DIR}/trace_tables.c
    ${CMAKE_CURRENT_LIST_DIR}/trace_decode.c
    ${CMAKE_CURRENT_LIST_DIR}/trace_adopt.c
    ${CMAKE_CURRENT_LIST_DIR}/trace_attach.c
    ${CMAKE_CURRENT_LIST_DIR}/trace_disc.c
    ${CMAKE_CURRENT_LIST_DIR}/trace_calib.c
    ${CMAKE_CURRENT_LIST_DIR}/discover.c
    ${CMAKE_CURRENT_LIST_DIR}/probe.c)
  target_include_directories(agentd_trace PUBLIC ${CMAKE_CURRENT_LIST_DIR})
  # where make install puts fleetq's NCCL profiler plugin: agentd attaches it at start
  target_compile_definitions(agentd_trace PRIVATE
    FLEETQ_NCCL_PLUGIN_PATH="${CMAKE_INSTALL_FULL_LIBDIR}/libfleetq-nccl-profiler.so"
    FLEETQ_CUPTI_PATH="${CMAKE_INSTALL_FULL_LIBDIR}/libfleetq-cupti.so")
  add_dependencies(agentd_trace fleetq_bpf_skels)
  target_link_libraries(agentd_trace PUBLIC agentd_store fleetq_bpf PkgConfig::LIBBPF
                        PkgConfig::LIBELF PkgConfig::ZLIB Threads::Threads)
endif()
