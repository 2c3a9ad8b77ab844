"""Lesson 08, step 1: SwiGLU's backward, derived by hand, before any kernel.

    y = silu(gate) * up,   silu(g) = g * sigmoid(g),   gate and up: the halves of x's last dimension

Given grad_y (the gradient of the loss with respect to y), write the gradient with respect to each half, as
PyTorch expressions of grad_y, gate and up (tensors of one shape; torch.sigmoid is there for you, but not
autograd and not torch.nn.functional.silu: the point is the formula your kernel will compute). Write it so that
backward needs x alone: sigmoid(gate) is recomputed, nothing from forward is kept. About 2 lines each.

    grad_up(grad_y, gate, up)   = ?      (y is linear in up)
    grad_gate(grad_y, gate, up) = ?      (the product rule on g * sigmoid(g); sigmoid' = sigmoid * (1 - sigmoid))

Check your work with the self-check cell in lesson 08: it compares your formulas with autograd in float64, on
values where silu bends (near 0), goes flat (very negative) and straight (very positive).
"""

import torch


def grad_up(grad_y: torch.Tensor, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    # BEGIN SOLUTION
    return grad_y * gate * torch.sigmoid(gate)
    # END SOLUTION


def grad_gate(grad_y: torch.Tensor, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    # BEGIN SOLUTION
    s = torch.sigmoid(gate)
    return grad_y * up * s * (1 + gate * (1 - s))
    # END SOLUTION
