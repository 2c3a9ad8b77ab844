// kernels/polynomial/polynomial.exercises.cu: lesson 01's exercise 1, CUDA part: your kernel and its
// launcher (Parts 2 and 3 of kernels/exercises/polynomial_forward.cuh), compiled for the four dtypes. No
// torch headers: editing the exercise recompiles only this file and polynomial.exercises.cpp.
#include "polynomial.h"
#include "polynomial_forward.cuh"

#define INSTANTIATE_V1(T) \
  template void poly_forward_v1<T>(const T*, const Acc<T>*, T*, int64_t, cudaStream_t);
COURSE_FOR_EACH_DTYPE(INSTANTIATE_V1)
