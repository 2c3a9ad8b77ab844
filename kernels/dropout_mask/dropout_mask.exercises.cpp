// kernels/dropout_mask/dropout_mask.exercises.cpp: lesson 05's second exercise
// (kernels/exercises/dropout_mask.cuh) on the CPU, for float and double. No torch header here, so editing the
// exercise recompiles this file in a second.
#include "dropout_mask.cuh"

#include "dropout_mask.h"

void dropout_mask_exercise(const float (&x)[4], float (&y)[4], uint64_t seed, uint64_t offset, uint64_t group,
                           double p) {
  dropout_group4<float>(x, y, seed, offset, group, p);
}
void dropout_mask_exercise(const double (&x)[4], double (&y)[4], uint64_t seed, uint64_t offset,
                           uint64_t group, double p) {
  dropout_group4<double>(x, y, seed, offset, group, p);
}
