// kernels/exercises/square_library.h: lesson 04's first exercise. Make y = x * x a PyTorch operator: the
// schemas of course::square (x -> y) and course::square_backward (grad_y, x -> grad_x) in the course's
// namespace, and square_kernel / square_backward_kernel (declared in square.library.cpp) as their kernels for
// CPU and CUDA tensors. Lesson 04 shows the same registration for course::polynomial.
#pragma once

// BEGIN SOLUTION
COURSE_LIBRARY(m) {
  define(m, "square(Tensor x) -> Tensor");
  define(m, "square_backward(Tensor grad_y, Tensor x) -> Tensor");
}

COURSE_IMPL_CPU_CUDA(m) {
  m.impl("square", &square_kernel);
  m.impl("square_backward", &square_backward_kernel);
}
// END SOLUTION
