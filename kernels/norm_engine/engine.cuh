// kernels/norm_engine/engine.cuh: the norm engine, the fast RMSNorm and LayerNorm kernels that the ops run by
// default (course::rms_norm, course::layer_norm where layernorm.h's EngineRoute sends it, and the fused
// add + norm), written once for both norms (Norm) and for a plain input or a fused residual add (kAdd: h = x
// + residual, then the norm of h). Lesson 05 teaches it; its kernels grew from lesson 03's ladder
// (kernels/layernorm/layernorm.cu) and keep that ladder's names where they are a rung of it
// (backward_v2_bulk_kernel). No torch header: .cu files include this one header.
//
// Files, one concern each:
//   row.cuh              a row in registers: Raw, to_pack, lane_sum, group_sum, load_input, store_y, opaque
//   grad.cuh             the gradient formula, once: grad_x, grad_x_prescaled
//   exchange.cuh         the row sums of a thread block cluster (cluster_sum, cluster_done), the bulk
//                        kernels' ring (start_ring, fill_ring) and their exchange by st.async (deliver_sums)
//   bulk_copy.cuh        the PTX of Hopper's bulk copies and mbarriers
//   forward.cuh          forward_kernel, forward_long_kernel, forward_bulk_kernel
//   backward.cuh         backward_kernel, backward_long_rows_kernel + backward_long_cols_kernel,
//                        backward_bulk_kernel, sum_partials_kernel
//   rounds.cuh           lesson 03b's backward_v2_bulk_kernel (rounds of whole rows by bulk copy, a
//                        cooperative grid), which RMSNorm's short rows and lesson 03's kAuto both run
//   config.h             the tuning as data: ForwardConfig kForward, BackwardConfig kBackward, with reasons
//   occupancy.h          row_threads, vectorizable, and the runtime's cached occupancy answers
//   launch_forward.cuh   launch_forward: the forward's choice of kernel (the table below), plans, launches
//   launch_backward.cuh  BackwardPath, plan_backward, backward_workspace, launch_backward
//
// What runs (float, half, bf16; double takes the rows-in-registers and long-row kernels, never the sm_90
// ones). vec: N a multiple of a 16-byte pack and every pointer 16-byte aligned (else one value per pack).
// M rows of N values; a line marked sm_90 applies on Hopper and newer only, else the next line that fits.
//
//   direction  shape class                                          arch   kernel
//   forward    vec, N >= 16384, two rows or more per cluster; not   sm_90  forward_bulk_kernel
//              float RMSNorm nor the fused add while a row fits in
//              registers; 2-byte rows too long for them only in
//              small batches (M <= SMs / 4) or from 3 rows a cluster
//              vec, short rows (<= 64 threads) over > 1.5 waves;    any    forward_kernel, 2 or 4 rows
//              not the fused add                                           per row group
//              a row fits 16 values per thread (1024 threads)       any    forward_kernel (kFew where the
//                                                                          grid is one wave)
//              a row fits 32 values per thread                      any    forward_kernel, 32 values
//              longer, fits one block's shared memory               any    forward_long_kernel
//              longer, fits a cluster's shared memory               sm_90  forward_long_kernel, 2-8 blocks
//              longer still                                         any    forward_long_kernel, re-read
//   backward   RMSNorm, vec, no grad_h, > 1 MiB of x, one 16-byte   sm_90  backward_v2_bulk_kernel<kRms>
//              pack per thread of a 1024-thread block                      (BackwardPath::kRounds)
//              2-byte, vec, N >= 16384                              sm_90  backward_bulk_kernel (kBulk)
//              8 values per thread fit (1024 threads; not vec: one  any    backward_kernel (kRows)
//              value per pack)
//              float, longer                                        sm_90  backward_bulk_kernel
//              float or double, twice that over 2 blocks            sm_90  backward_kernel, cluster of 2
//              vec, 16 values per thread fit                        any    backward_kernel, 16 values
//              longer                                               sm_90  backward_bulk_kernel
//              longer                                               any    backward_long_rows_kernel +
//                                                                          backward_long_cols_kernel
//              then, but for kRounds                                any    sum_partials_kernel
// The ops: course::rms_norm and the fused add + RMSNorm / LayerNorm (add_norm.cu) always run the engine;
// course::layer_norm runs it where layernorm.route.cu's table (layernorm.h's EngineRoute) says so;
// norm_dropout has its own kernels on row.cuh's primitives. describe_backward (launch_backward.cuh) names the
// backward row.
//
// The kernels:
//   forward_kernel            rows in registers: a row group of 1 to 32 warps per row, 16-byte packs; short
//                             rows in many waves 2 or 4 rows per row group (forward_short_rows)
//   forward_long_kernel       one block per row, or a cluster of 2-8 blocks per row (sm_90); the row kept in
//                             shared memory where it fits, else read again (from L2)
//   forward_bulk_kernel       long rows on sm_90: backward_bulk_kernel's design for the forward (a persistent
//                             grid of clusters of 1-8 blocks per row, slices by bulk copy into a ring of
//                             stages, the row's numbers pushed between the blocks), so rows are always in
//                             flight while one is reduced and written
//   backward_kernel           a persistent grid of row groups, rows in registers with the next one in flight,
//                             grad_weight (and grad_bias) summed per block in shared memory, one row of
//                             partial sums per block; over a thread block cluster (sm_90) each block holds a
//                             slice of the row and the row sums meet through distributed shared memory
//   backward_bulk_kernel      rows too long for registers, sm_90: a persistent grid of clusters of 1-8 blocks
//                             per row, the row's slices of x and grad_y arriving by bulk copy into a ring of
//                             shared-memory stages, two rows in flight while one is worked on
//   backward_long_rows_kernel, backward_long_cols_kernel: rows too long for registers elsewhere: the two row
//                             sums by one block per row, then grad_x and the partial column sums by column
//                             tiles (x and grad_y read twice)
//   backward_v2_bulk_kernel   (rounds.cuh) whole rounds of rows by bulk copy, three in flight per SM, a
//                             cooperative grid that finishes grad_weight itself
//   sum_partials_kernel       adds the partial rows in a fixed order (the same bits on every run), launched
//                             with PDL after the kernel that writes them
//
// Norm: kRms, y = x * rstd * w, rstd = 1 / sqrt(mean(x^2) + eps) (one row sum); kLayer, y = (x - mean) *
// rstd * w + b (two row sums, from registers). The backward's formula: grad.cuh.
#pragma once

#include "launch_backward.cuh"
#include "launch_forward.cuh"
