"""kernels/polynomial/polynomial_triton.py: lesson 01's y = a*x^3 + b*x^2 + c*x + d as a Triton kernel (lesson 04),
registered with torch.library.triton_op, so that torch.compile sees the kernel inside the op.

    polynomial_kernel   one program per BLOCK elements: load x, Horner's rule in the math dtype (float32, or
                        float64 for float64 x), store y. Triton picks the width of each load (16 bytes where
                        the pointers allow): what forward v2 in kernels/polynomial/polynomial.cu does by hand with Packs.
    launch(x, coeffs)   the glue: contiguous x, coefficients in the math dtype, a new output, the grid
    polynomial(x, coeffs)  the op lesson04::polynomial_triton (CUDA tensors: Triton compiles for the GPU)

A triton_op's body is Python that torch.compile can trace: the torch calls in `launch` and the kernel launch,
wrapped by wrap_triton. So the op needs no fake kernel (tracing the body on fake tensors gives the output),
and Inductor can put the kernel into the graph it compiles.
"""

import torch
import triton
import triton.language as tl
from torch.library import triton_op, wrap_triton

BLOCK = 1024  # elements per program: 8 per thread with Triton's default 4 warps


@triton.jit
def polynomial_kernel(x_ptr, c_ptr, y_ptr, n, BLOCK: tl.constexpr):
    start = tl.program_id(0).to(tl.int64) * BLOCK  # in 64 bits: n can pass 2^31
    offsets = start + tl.arange(0, BLOCK)
    mask = offsets < n  # the last program runs past the end
    a, b, c, d = tl.load(c_ptr), tl.load(c_ptr + 1), tl.load(c_ptr + 2), tl.load(c_ptr + 3)
    x = tl.load(x_ptr + offsets, mask=mask).to(a.dtype)
    y = ((a * x + b) * x + c) * x + d
    tl.store(y_ptr + offsets, y.to(y_ptr.dtype.element_ty), mask=mask)


def launch(x: torch.Tensor, coeffs: torch.Tensor, run=wrap_triton) -> torch.Tensor:
    """y for x of any shape; `run(kernel)` makes the kernel launchable (wrap_triton inside the op; a test under
    TRITON_INTERPRET=1 passes the kernel itself)."""
    torch._check(coeffs.shape == (4,), lambda: f"coeffs must have shape [4], got {list(coeffs.shape)}")
    x = x.contiguous()
    c = coeffs.to(torch.float64 if x.dtype == torch.float64 else torch.float32).contiguous()
    y = torch.empty_like(x)
    n = x.numel()
    if n > 0:
        run(polynomial_kernel)[(triton.cdiv(n, BLOCK),)](x, c, y, n, BLOCK=BLOCK)
    return y


@triton_op("lesson04::polynomial_triton", mutates_args=())
def polynomial(x: torch.Tensor, coeffs: torch.Tensor) -> torch.Tensor:
    return launch(x, coeffs)
