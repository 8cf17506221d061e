# SPDX-License-Identifier: MIT
# probe_cost: drives the stand-in libnccl for bench/trace.sh (traced call cost) and
# bench/drops.sh (events at a paced rate). Not part of ctest.
add_executable(probe_cost ${CMAKE_CURRENT_LIST_DIR}/probe_cost.c)
target_link_libraries(probe_cost PRIVATE ${CMAKE_DL_LIBS} Threads::Threads)
