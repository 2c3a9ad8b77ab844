"""helpers.debug, lesson 07's tools: a child process reports a crash instead of dying with the notebook, C-level
output (a kernel's printf) is captured, scan narrows a wrong answer down; and selfcheck.sanitizable's
sanitize=True runs the sanitizer first with the check's own seed."""

import ctypes

import torch

from helpers import debug, selfcheck


def test_a_crash_in_a_child_process_is_reported_and_this_process_goes_on():
    child = debug.run_isolated("import os\nprint('before the crash', flush=True)\nos.abort()")
    assert not child.ok and child.returncode < 0 and "SIGABRT" in child.exit()
    assert "before the crash" in child.stdout


def test_a_child_process_gets_the_environment_asked_for_and_can_import_the_course():
    child = debug.run_isolated(
        "import os\nfrom helpers import env\nprint(os.environ['CUDA_LAUNCH_BLOCKING'], env.REPO_ROOT.name)",
        env_vars={"CUDA_LAUNCH_BLOCKING": 1},
    )
    assert child.ok, child.stderr
    assert child.stdout.split()[0] == "1"


def test_a_child_past_its_time_limit_is_killed_and_says_so():
    child = debug.run_isolated("import time\ntime.sleep(30)", timeout=1)
    assert child.timed_out and not child.ok and "time limit" in child.exit()


def test_c_level_printf_is_captured():
    with debug.captured_stdout() as out:
        ctypes.CDLL(None).printf(b"from C: %d\n", 42)
    assert out.text == "from C: 42\n"


def test_scan_names_the_sizes_that_fail_and_the_first_bad_element(capsys):
    def tail_bug(x):  # a "kernel" that skips the last element when the size is odd
        y = torch.empty_like(x)
        y[: x.numel() // 2 * 2] = 2 * x[: x.numel() // 2 * 2]
        return y

    rows = debug.scan(tail_bug, lambda x: 2 * x, lambda n: (torch.ones(n),), [2, 3, 4, 5])
    assert [r.ok for r in rows] == [True, False, True, False]
    assert rows[1].bad == 1 and rows[1].first.startswith("first at [2]: got nan")
    assert "1 of 3 wrong" in capsys.readouterr().out


def test_sanitize_true_runs_the_sanitizer_first_with_the_checks_seed(monkeypatch):
    calls = []
    monkeypatch.setattr(selfcheck, "sanitized", lambda name, seed=None: calls.append(("sanitized", name, seed)))

    @selfcheck.sanitizable
    def check(device=None, ext=None, seed=None):
        calls.append(("check", seed))
        return 1

    assert check(seed=7) == 1 and calls == [("check", 7)]
    calls.clear()
    assert check(sanitize=True, seed=7) == 1
    assert calls == [("sanitized", "test_debug", 7), ("check", 7)]  # the name: the check's module's last part


def test_under_the_sanitizer_the_large_case_is_left_out(monkeypatch, capsys):
    monkeypatch.setenv(selfcheck.SANITIZING, "1")
    monkeypatch.setattr(selfcheck.env, "cuda_mode", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert selfcheck.large_case("x", None, None, None) is False
    assert "left out under compute-sanitizer" in capsys.readouterr().out
