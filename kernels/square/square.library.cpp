// kernels/square/square.library.cpp: compiles lesson 04's first exercise, kernels/exercises/square_library.h:
// course::square and course::square_backward as torch.library ops. The exercise is all this file compiles
// besides torch's registration header, so an edit to it rebuilds this one small file (seconds) and relinks.
// Its registrations run when the op's library loads; the exercise's self-check loads a new build in a child
// process first, since a registration that does not match its kernel ends the process that loads it.
#include "common/library.h"

// The kernels your registration names (square.cpp, the course's), for CPU and CUDA tensors alike.
at::Tensor square_kernel(const at::Tensor& x);
at::Tensor square_backward_kernel(const at::Tensor& grad_y, const at::Tensor& x);

#include "square_library.h"
