"""course::csr_matmul's Python side (lesson 09's practice set: the answer). csr_matmul.cpp registers the ops'
schemas and their CPU and CUDA kernels; this file adds what torch.compile and autograd need, and the function a
user calls:

    register(lib)        the fake kernels and the autograd formula, made with lib=... (a torch.library.Library
                         fragment of the namespace `course`): they last as long as `lib` does
    csr_matmul(A, B)     A @ B for A a torch.sparse_csr_tensor (or the tuple (crow, col, values, n_cols)), B dense

The gradient is for the dense operand only: A is data (a graph's adjacency, a pruned weight's pattern), and its
values get none. An input whose values require grad is refused with an error that says so, rather than left
without a gradient silently. (Their gradient would be grad_values[k] = grad_Y[i, :] . B[j, :] for the nonzero k
at (i, j): a sampled dense-dense product, another op.)
"""

import torch

KERNELS = ("auto", "warp_per_row", "balanced")  # the CUDA kernels by name; the CPU has one loop for all


def _out_shape(rows, operand: torch.Tensor) -> tuple:
    return (rows,) if operand.dim() == 1 else (rows, operand.shape[1])


def _check_csr(crow_indices, col_indices, values) -> None:
    # The kernel's checks of shapes, for fake tensors: torch.compile then reports a bad shape as the kernel would.
    torch._check(
        crow_indices.dim() == 1 and crow_indices.shape[0] >= 1,
        lambda: f"crow_indices must be 1-D with M + 1 values, got shape {list(crow_indices.shape)}",
    )
    torch._check(
        values.dim() == 1 and col_indices.dim() == 1 and values.shape[0] == col_indices.shape[0],
        lambda: (
            f"values must hold one value per entry of col_indices, got {list(values.shape)} and "
            f"{list(col_indices.shape)}"
        ),
    )


def csr_matmul_fake(crow_indices, col_indices, values, dense, n_cols_A, variant="auto"):
    """What course::csr_matmul returns: [M] for a 1-D dense, [M, N] for [K, N]; values' dtype, contiguous."""
    _check_csr(crow_indices, col_indices, values)
    torch._check(dense.dim() in (1, 2), lambda: f"dense must be 1-D or 2-D, got shape {list(dense.shape)}")
    torch._check(
        dense.shape[0] == n_cols_A, lambda: f"dense must have n_cols_A = {n_cols_A} rows, got {list(dense.shape)}"
    )
    return dense.new_empty(_out_shape(crow_indices.shape[0] - 1, dense))


def csr_matmul_backward_fake(crow_indices, col_indices, values, grad_y, k, variant="auto"):
    """What course::csr_matmul_backward returns: grad_dense, [k] or [k, N] as grad_y is [M] or [M, N]."""
    _check_csr(crow_indices, col_indices, values)
    torch._check(grad_y.dim() in (1, 2), lambda: f"grad_y must be 1-D or 2-D, got shape {list(grad_y.shape)}")
    torch._check(
        grad_y.shape[0] == crow_indices.shape[0] - 1,
        lambda: f"grad_y must have M = {crow_indices.shape[0] - 1} rows, got {list(grad_y.shape)}",
    )
    return grad_y.new_empty(_out_shape(k, grad_y))


def setup_context(ctx, inputs, output):
    crow_indices, col_indices, values, dense, n_cols_A, variant = inputs
    if values.requires_grad:
        raise ValueError(
            "values requires grad, but course::csr_matmul differentiates the dense operand only (A is data): "
            "pass values.detach() (or A.detach())"
        )
    # BEGIN SOLUTION
    ctx.save_for_backward(crow_indices, col_indices, values)  # A only: grad_dense = A^T @ grad_y needs no B
    ctx.k, ctx.variant = n_cols_A, variant
    # END SOLUTION


def backward(ctx, grad_y):
    # BEGIN SOLUTION
    crow_indices, col_indices, values = ctx.saved_tensors
    grad_dense = None
    if ctx.needs_input_grad[3]:
        grad_dense = torch.ops.course.csr_matmul_backward(crow_indices, col_indices, values, grad_y, ctx.k, ctx.variant)
    return None, None, None, grad_dense, None, None
    # END SOLUTION


def csr_matmul(A, B: torch.Tensor, variant: str = "auto") -> torch.Tensor:
    """A @ B, differentiable in B once register() has run. A: a 2-D torch.sparse_csr_tensor [M, K] (int32 indices
    are widened to int64), or the tuple (crow_indices, col_indices, values, n_cols). B: [K, N] or [K]."""
    if isinstance(A, tuple):
        crow, col, values, n_cols = A
    else:
        if A.layout != torch.sparse_csr:
            raise TypeError(f"A must be a torch.sparse_csr_tensor (or (crow, col, values, n_cols)), got {A.layout}")
        if A.dim() != 2:
            raise ValueError(f"A must be a 2-D CSR matrix, got shape {list(A.shape)} (batched CSR is not supported)")
        crow, col, values, n_cols = A.crow_indices(), A.col_indices(), A.values(), A.shape[1]
    return torch.ops.course.csr_matmul(crow.long(), col.long(), values, B, n_cols, variant)


def register(lib: torch.library.Library) -> None:
    torch.library.register_fake("course::csr_matmul", csr_matmul_fake, lib=lib)
    torch.library.register_fake("course::csr_matmul_backward", csr_matmul_backward_fake, lib=lib)
    torch.library.register_autograd("course::csr_matmul", backward, setup_context=setup_context, lib=lib)
