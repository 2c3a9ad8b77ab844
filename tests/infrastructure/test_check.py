import pytest
import torch
from torch.autograd.gradcheck import GradcheckError

from helpers import check, selfcheck


def test_assert_close_passes_within_dtype_tolerance():
    x = torch.randn(100, dtype=torch.bfloat16)
    check.assert_close(x.float().mul(1.001).bfloat16(), x)


def test_assert_close_names_first_mismatch():
    a = torch.zeros(3, 4)
    b = a.clone()
    b[1, 2] = 1.0
    b[2, 3] = 5.0
    with pytest.raises(AssertionError) as e:
        check.assert_close(a, b, name="y")
    msg = str(e.value)
    assert "y: 2 of 12 elements differ" in msg
    assert "first at [1, 2]: got 0.0, expected 1.0" in msg
    assert "Greatest absolute difference: 5.0 at index (2, 3)" in msg  # torch.testing's own report follows


def test_assert_close_explains_nan_as_unwritten():
    a = torch.full((5,), float("nan"))
    with pytest.raises(AssertionError, match="never written"):
        check.assert_close(a, torch.ones(5))


def test_assert_close_counts_only_the_nan_the_expected_value_does_not_have():
    a, e = torch.tensor([float("nan"), 1.0, float("nan")]), torch.tensor([float("nan"), 2.0, 3.0])
    with pytest.raises(AssertionError) as info:
        check.assert_close(a, e, name="y", equal_nan=True)  # keywords go on to torch.testing.assert_close
    msg = str(info.value)
    assert "y: 2 of 3 elements differ" in msg and "first at [1]: got 1.0, expected 2.0" in msg
    assert "1 element(s) are NaN" in msg


@pytest.mark.parametrize("bad, what", [(torch.ones(4, 1), "shape"), (torch.ones(4, dtype=torch.float64), "dtype")])
def test_assert_close_checks_metadata(bad, what):
    with pytest.raises(AssertionError, match=f"^y: .*'{what}' do not match"):
        check.assert_close(bad, torch.ones(4), name="y")


def test_assert_close_wants_a_tensor():
    with pytest.raises(AssertionError, match="y should be a tensor, got NoneType"):
        check.assert_close(None, torch.ones(4), name="y")


def test_tolerance_is_dtype_aware():
    x = torch.ones(4, dtype=torch.float32)
    with pytest.raises(AssertionError):
        check.assert_close(x * (1 + 1e-3), x)  # fine for half precision, not for float32
    check.assert_close((x * (1 + 1e-3)).half(), x.half())


def test_poisoned_fills_empty_with_nan_and_restores():
    before = torch.are_deterministic_algorithms_enabled()
    with check.poisoned():
        assert torch.isnan(torch.empty(10)).all()
        assert torch.isnan(torch.empty_like(torch.ones(3, 3))).all()
    assert torch.are_deterministic_algorithms_enabled() == before


def test_gradcheck_accepts_correct_and_rejects_wrong_gradient():
    class Wrong(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x**2

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * x  # should be 2*x

    x = torch.randn(5, requires_grad=True)
    assert check.gradcheck(lambda t: t**2, x)
    with pytest.raises(GradcheckError):
        check.gradcheck(Wrong.apply, x)


def test_gradcheck_needs_an_input_requiring_grad():
    with pytest.raises(ValueError, match="requires_grad"):
        check.gradcheck(lambda t: t, torch.randn(3))


def test_guarded_counts_writes_past_either_end_of_the_view():
    import torch

    from helpers import selfcheck

    for fill in (1234.0, float("nan")):
        g = selfcheck.guarded(torch.full((3, 5), float("nan")), 8, fill)
        assert g.view.shape == (3, 5) and g.changed() == (0, 0) and g.outside("y") is None
        g.view.fill_(1.0)  # writes inside the view leave the guard alone
        assert g.changed() == (0, 0)
        g.buffer[8 + 15 : 8 + 17] = 7.0  # two past the end
        g.buffer[0] = 7.0  # one before the start
        assert g.changed() == (1, 2) and "2 element(s) after its end and 1 before" in g.outside("y")


def test_same_every_run_fails_at_the_first_run_whose_bits_differ(capsys):
    want = torch.ones(8)
    runs = iter([want.clone(), want.clone(), want + 1e-7, want.clone()])  # close, but not the first run's bits
    differing = 3  # the call whose result is close to the reference but not the first call's bits
    with pytest.raises(AssertionError, match=rf"run {differing} of 4[\s\S]*8 values differ from the first run"):
        selfcheck.same_every_run(
            "toy", lambda: next(runs), want, name="out", case="a toy case", repeats=4, hint="h", seed=1, why="w"
        )
    assert "❌ toy: not yet" in capsys.readouterr().out


def test_same_every_run_fails_a_run_far_from_the_reference_and_passes_identical_runs(capsys):
    want = torch.ones(8)
    with pytest.raises(AssertionError, match=f"run {1} of 2"):
        selfcheck.same_every_run(
            "toy", lambda: want * 2, want, name="out", case="a toy case", repeats=2, hint="h", seed=1, why="w"
        )
    assert (
        selfcheck.same_every_run(
            "toy", lambda: want.clone(), want, name="out", case="a toy case", repeats=3, hint="h", seed=1, why="w"
        )
        == 3
    )
    assert "3 runs of a toy case" in capsys.readouterr().out
