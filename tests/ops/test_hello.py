import pytest
import torch

from helpers import check, loader


def test_hello_adds_one(device):
    ext = loader.load("hello")
    x = torch.randn(1151, device=device)
    with check.poisoned():
        check.assert_close(ext.forward(x), x + 1)
    assert ext.forward(torch.empty(0, device=device)).numel() == 0


def test_hello_rejects_other_dtypes(device):
    with pytest.raises(TypeError, match="x must be float32, got Double"):
        loader.load("hello").forward(torch.ones(3, dtype=torch.float64, device=device))
