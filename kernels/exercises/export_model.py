"""Exercise 2 of lesson 06: deploy a model that uses the course's ops. Write export_and_save: export `model` with
torch.export for inputs like `x` and save the program to `path`, so that another process, with only the course's
wheel installed (not your model's class, not this folder), loads it with torch.export.load and runs it.

What the program must do there:
  * give the model's *inference* output: the model comes to you as training left it;
  * take any batch size, not only x's (dimension 0 of x varies; the other dimensions do not);
  * still call torch.ops.course.polynomial (the wheel's kernel), not something else in its place.

About 3 lines. Check your work with the self-check cell in lesson 06: it calls your function, then loads the file
in a fresh process that sees only the wheel, and compares its outputs with the model's on several batch sizes.
"""

from pathlib import Path

import torch


def export_and_save(model: torch.nn.Module, x: torch.Tensor, path: Path) -> None:
    # TODO(exercise): your code here (the solution is 3 lines).
    raise NotImplementedError("exercise: your code here")
