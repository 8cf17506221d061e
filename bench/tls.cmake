# SPDX-License-Identifier: MIT
# bench_tls: CPU per TLS handshake, agentd's server context against a client set up as
# fleetq's, full vs resumed, in one process (bench/tls-cost.sh runs it).
add_executable(bench_tls ${CMAKE_CURRENT_LIST_DIR}/bench_tls.c)
target_link_libraries(bench_tls PRIVATE fq_transport PkgConfig::OPENSSL)
