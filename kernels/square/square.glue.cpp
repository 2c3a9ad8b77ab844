// kernels/square/square.glue.cpp: compiles lesson 02b's exercise, kernels/exercises/square_glue.h (the glue
// of the square op, its C++ autograd Function and the Python binding), and nothing else of the op: an edit to
// the exercise rebuilds this one file (seconds with the precompiled torch headers) and relinks.
#include "square/square.h"  // the course's CPU loops and CUDA launchers

#include <torch/autograd.h>
#include <torch/csrc/utils/pybind.h>  // PYBIND11_MODULE: your binding is in the exercise

#include "common/checks.h"  // check_floating, check_like, ..., OnDevice, cuda_ptr
#include "square_glue.h"
