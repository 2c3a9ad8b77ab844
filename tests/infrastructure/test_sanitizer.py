"""helpers/sanitizer.py: compute-sanitizer's reports read as data (recorded reports of each tool, in the formats
the tool prints), finding the tool, and the runner end to end against a fake compute-sanitizer (no GPU here);
helpers.selfcheck.sanitized's decisions (skips, which tools, the child's command, the verdict); and
benchmarks/sanitize_sweep.py: every op's driver lists its cases, the sweep runs and judges them (a fake tool)."""

import json
import os
import shutil
import sys
import textwrap
from pathlib import Path

import pytest

from helpers import env, sanitizer, selfcheck

MEMCHECK = """\
========= COMPUTE-SANITIZER
case: polynomial v1 float32 (1151,)
========= Invalid __global__ write of size 4 bytes
=========     at void poly_forward_v1_kernel<float>(const float *, const float *, float *, long)+0x1d0 in /work/main/kernels/solutions/polynomial_forward.cuh:30
=========     by thread (127,0,0) in block (4,0,0)
=========     Access at 0x7f3a2e000e00 is out of bounds
=========     and is 4 bytes after the nearest allocation at 0x7f3a2e000000 of size 4604 bytes
=========
========= Invalid __global__ read of size 16 bytes
=========     at void norm_engine::load_input<float, 4>(const float *, long)+0x80 in /work/main/kernels/norm_engine/row.cuh:41
=========     by thread (3,0,0) in block (0,0,0)
=========     Access at 0x7f3a2e001000 is out of bounds
=========     and is 1 bytes before the nearest allocation at 0x7f3a2e001001 of size 64 bytes
=========     Device Frame: void norm_engine::forward_kernel<float, (Norm)0, false, 4, 4, false, 1>(const float *)+0x2a0 in /work/main/kernels/norm_engine/forward.cuh:120
=========
========= Program hit cudaErrorLaunchFailure (error 719) due to "unspecified launch failure" on CUDA API call to cudaStreamSynchronize.
=========
========= ERROR SUMMARY: 3 errors
"""

MEMCHECK_NO_LINEINFO = """\
========= COMPUTE-SANITIZER
========= Invalid __shared__ write of size 4 bytes
=========     at bias_grad_partials_kernel+0x140
=========     by thread (0,15,0) in block (2,1,0)
=========     Address 0x1000 is out of bounds
=========
========= ERROR SUMMARY: 1 error
"""

MEMCHECK_2021 = """\
========= COMPUTE-SANITIZER
========= Invalid __global__ write of size 4
=========     at 0x000001d0 in /home/me/course/kernels/hello/hello.cu:12:add_one(float*, int)
=========     by thread (255,0,0) in block (3,0,0)
=========     Address 0x7f0000000400 is out of bounds
=========     Saved host backtrace up to driver entry point at kernel launch time
=========     Host Frame:/lib64/libcuda.so.1 (cuLaunchKernel + 0x2b8) [0x222dc8]
=========
========= ERROR SUMMARY: 1 error
"""

RACECHECK = """\
========= COMPUTE-SANITIZER
case: fused_bias_relu bias grad v4 float32
========= Error: Race reported between Write access at void bias_grad_partials_kernel<float>(const float *, const float *, float *, long, long, long)+0x390 in /work/main/kernels/solutions/bias_grad.cuh:65
=========     and Read access at void bias_grad_partials_kernel<float>(const float *, const float *, float *, long, long, long)+0x350 in /work/main/kernels/solutions/bias_grad.cuh:65 [2048 hazards]
=========
========= Warning: Race reported between Read access at void reduce_kernel<float>(float *)+0xe0 in /work/main/kernels/x.cu:7
=========     and Write access at void reduce_kernel<float>(float *)+0x140 in /work/main/kernels/x.cu:9 [4 hazards]
=========
========= RACECHECK SUMMARY: 2 hazards displayed (1 error, 1 warning)
"""

RACECHECK_HAZARDS = """\
========= COMPUTE-SANITIZER
========= Error: Potential WAW hazard detected at __shared__ 0x0 in block (0,0,0) :
=========     Write Thread (31,0,0) at 0x000000f0 in raceGroupBasic.cu:13:sumKernel(int*, int*)
=========     Write Thread (0,0,0) at 0x000000f0 in raceGroupBasic.cu:13:sumKernel(int*, int*)
=========     Current Value : 0, Incoming Value : 1
=========
========= RACECHECK SUMMARY: 100 hazards displayed
========= (4528176 errors, 661824 warnings)
"""

INITCHECK = """\
========= COMPUTE-SANITIZER
========= Uninitialized __global__ memory read of size 4 bytes
=========     at void sum_partials_kernel<float, float, 4>(const float *, int, int, float *, float *)+0x70 in /work/main/kernels/norm_engine/backward.cuh:470
=========     by thread (5,2,0) in block (1,0,0)
=========     Address 0x7f3a2e200010
=========
========= ERROR SUMMARY: 1 error
"""

SYNCCHECK = """\
========= COMPUTE-SANITIZER
========= Barrier error detected. Divergent thread(s) in block.
=========     at void layernorm::backward_row<float>(float *)+0x8f0 in /work/main/kernels/layernorm/layernorm_common.cuh:200
=========     by thread (63,0,0) in block (0,0,0)
=========     Device Frame: void backward_v2_kernel<float>(const float *)+0x1200 in /work/main/kernels/layernorm/layernorm.cu:310
=========
========= Barrier error detected. Divergent thread(s) in warp
=========     at 0x000008f0 in /home/training2/cuda/syncthreads.cu:20:globFunction(int*)
=========     by thread (37,0,0) in block (0,0,0)
=========     Device Frame:/home/training2/cuda/syncthreads.cu:20:globFunction(int*) (globFunction(int*) : 0x8f0)
=========
========= ERROR SUMMARY: 2 errors
"""

CLEAN = """\
========= COMPUTE-SANITIZER
============================= test session starts ==============================
case: rmsnorm op bfloat16 (72, 8192)
ok
========= ERROR SUMMARY: 0 errors
"""


# The reports name files by absolute path, as the tool does; the fixtures are written for a checkout at /work/main
# and moved to wherever this one is, so that paths inside the course read as relative ones.
ROOT = str(env.REPO_ROOT)
MEMCHECK, MEMCHECK_NO_LINEINFO, RACECHECK, RACECHECK_HAZARDS, INITCHECK, SYNCCHECK, CLEAN = (
    t.replace("/work/main", ROOT)
    for t in (MEMCHECK, MEMCHECK_NO_LINEINFO, RACECHECK, RACECHECK_HAZARDS, INITCHECK, SYNCCHECK, CLEAN)
)


def test_a_memcheck_report_gives_each_finding_its_kernel_line_thread_and_allocation():
    found, count, warnings, notes = sanitizer.parse(MEMCHECK)
    assert count == 3 and warnings == 0 and notes == []
    write, read, api = found
    assert (write.kind, write.size, write.what) == ("invalid access", 4, "Invalid __global__ write of size 4 bytes")
    assert write.kernel.startswith("void poly_forward_v1_kernel<float>(const float *")
    assert write.location == f"{ROOT}/kernels/solutions/polynomial_forward.cuh:30"
    assert (write.thread, write.block) == ((127, 0, 0), (4, 0, 0))
    assert "4 bytes after the nearest allocation" in write.detail
    assert write.context == "case: polynomial v1 float32 (1151,)"
    # an inlined device function: where it happened, and the kernel from the outermost device frame
    assert read.function.startswith("void norm_engine::load_input") and read.location.endswith("row.cuh:41")
    assert read.kernel.startswith("void norm_engine::forward_kernel<float")
    assert (api.kind, api.what) == ("api error", "CUDA API call cudaStreamSynchronize failed")
    assert "cudaErrorLaunchFailure" in api.detail and api.kernel is None


def test_reports_without_line_information_and_in_the_older_format_still_name_kernel_and_thread():
    (f,), count, _, _ = sanitizer.parse(MEMCHECK_NO_LINEINFO)
    assert count == 1 and f.what.startswith("Invalid __shared__ write") and f.kernel == "bias_grad_partials_kernel"
    assert f.location is None and (f.thread, f.block) == ((0, 15, 0), (2, 1, 0))
    (f,), count, _, _ = sanitizer.parse(MEMCHECK_2021)
    assert count == 1 and f.size == 4 and f.kernel == "add_one(float*, int)"
    assert f.location == "/home/me/course/kernels/hello/hello.cu:12" and "Host Frame" not in f.detail


def test_a_racecheck_report_names_both_accesses_and_counts_errors_apart_from_warnings():
    found, count, warnings, _ = sanitizer.parse(RACECHECK, "racecheck")
    assert (count, warnings) == (1, 1)
    race, warned = found
    assert race.kind == "race" and race.severity == "error" and warned.severity == "warning"
    assert race.what == "Race reported between write access and read access"
    assert race.location == f"{ROOT}/kernels/solutions/bias_grad.cuh:65"
    assert race.kernel.startswith("void bias_grad_partials_kernel<float>")
    assert "and read access at kernels/solutions/bias_grad.cuh:65 (2048 hazards)" in race.detail
    assert race.context == "case: fused_bias_relu bias grad v4 float32"


def test_racecheck_hazard_reports_and_a_summary_split_over_two_lines_are_read():
    (f,), count, warnings, _ = sanitizer.parse(RACECHECK_HAZARDS, "racecheck")
    assert (count, warnings) == (4528176, 661824)
    assert f.kind == "race" and f.block == (0, 0, 0) and f.thread == (31, 0, 0)
    assert f.location == "raceGroupBasic.cu:13" and f.kernel == "sumKernel(int*, int*)"
    assert "Write Thread (0,0,0)" in f.detail and "Incoming Value : 1" in f.detail


def test_an_initcheck_report_is_an_uninitialized_read():
    (f,), count, _, _ = sanitizer.parse(INITCHECK, "initcheck")
    assert count == 1 and (f.kind, f.size) == ("uninitialized read", 4)
    assert f.location.endswith("backward.cuh:470") and f.thread == (5, 2, 0)


def test_a_synccheck_report_is_a_barrier_error_in_the_new_and_the_old_format():
    (new, old), count, _, _ = sanitizer.parse(SYNCCHECK, "synccheck")
    assert count == 2 and new.kind == old.kind == "barrier"
    assert new.what == "Barrier error detected. Divergent thread(s) in block."
    assert new.function.startswith("void layernorm::backward_row") and new.kernel.startswith("void backward_v2_kernel")
    assert old.kernel == "globFunction(int*)" and old.location == "/home/training2/cuda/syncthreads.cu:20"


def test_a_clean_report_has_no_finding_and_the_programs_own_rules_of_equals_signs_are_not_the_tools():
    found, count, warnings, notes = sanitizer.parse(CLEAN)
    assert (found, count, warnings, notes) == ([], 0, 0, [])
    report = sanitizer.Report("memcheck", 0, 1.5, found, count, output=CLEAN)
    assert report.ok and report.summary() == "memcheck: 0 errors (1.5 s)"
    assert report.show().startswith("✅ memcheck: 0 errors")


def test_a_report_without_a_summary_or_with_a_failed_program_is_not_ok():
    cut = MEMCHECK.split("========= ERROR SUMMARY")[0]
    report = sanitizer.Report("memcheck", 0, 2.0, *sanitizer.parse(cut)[:3], output=cut)
    assert report.error_count is None and not report.ok
    assert "no summary from the tool" in report.summary()
    failed = sanitizer.Report("memcheck", 1, 2.0, [], 0, output="Traceback ...\nRuntimeError: boom\n")
    assert not failed.ok and "the program failed (exit status 1)" in failed.summary()
    assert "| RuntimeError: boom" in failed.show()
    assert not sanitizer.Report("racecheck", None, 9.0, [], None, timed_out=True).ok


def test_show_lists_what_kernel_source_line_and_thread_of_each_finding(tmp_path):
    src = tmp_path / "k.cu"
    src.write_text("__global__ void k(float* y) {\n  y[threadIdx.x] = 1;  // the bad line\n}\n")
    text = MEMCHECK.replace(f"{ROOT}/kernels/solutions/polynomial_forward.cuh:30", f"{src}:2")
    found, count, warnings, notes = sanitizer.parse(text)
    shown = sanitizer.Report("memcheck", 1, 3.0, found, count, warnings, notes, text).show(limit=1)
    assert shown.splitlines()[0] == "❌ memcheck: 3 errors; the program failed (exit status 1) (3.0 s)"
    assert "1. Invalid __global__ write of size 4 bytes" in shown
    assert f"where:   {src}:2" in shown and "y[threadIdx.x] = 1;  // the bad line" in shown
    assert "by:      thread (127,0,0) in block (4,0,0)" in shown
    assert "... and 2 more findings" in shown


# --------------------------------------------------------------------------------------------------
# Finding the tool
# --------------------------------------------------------------------------------------------------


def _fake_tool(path: Path, body: str = "exit 0", mode: int = 0o755) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(mode)
    return path


@pytest.fixture
def nowhere(monkeypatch, tmp_path):
    """No compute-sanitizer anywhere but where a test puts one."""
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setattr(sanitizer, "SYSTEM_ROOTS", (tmp_path / "no-cuda",))
    monkeypatch.setattr(env, "_site_packages", lambda: [])


def test_find_takes_the_tool_on_path_first(nowhere, monkeypatch, tmp_path):
    exe = _fake_tool(tmp_path / "bin" / "compute-sanitizer")
    _fake_tool(tmp_path / "cuda" / "bin" / "compute-sanitizer")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda"))
    assert sanitizer.find() == exe and sanitizer.missing_reason() == ""


def test_find_looks_in_cuda_home_then_in_the_toolkits_own_folder(nowhere, monkeypatch, tmp_path):
    exe = _fake_tool(tmp_path / "cuda" / "compute-sanitizer" / "compute-sanitizer")
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda"))
    assert sanitizer.find() == exe


@pytest.mark.parametrize(
    "layout",
    [
        "nvidia/cu13/bin/compute-sanitizer",
        "nvidia/cuda_sanitizer_api/bin/compute-sanitizer",
        "nvidia/cuda_sanitizer_api/compute-sanitizer/compute-sanitizer",
    ],
)
def test_find_takes_nvidias_pip_wheels_and_makes_their_tool_executable(nowhere, monkeypatch, tmp_path, layout):
    site = tmp_path / "site-packages"
    exe = _fake_tool(site / layout, mode=0o644)  # the CUDA 12.9 wheel ships it without the execute bit
    monkeypatch.setattr(env, "_site_packages", lambda: [site])
    assert sanitizer.find() == exe and os.access(exe, os.X_OK)


def test_without_the_tool_the_reason_names_the_pip_package_for_torchs_cuda(nowhere, monkeypatch):
    torch = pytest.importorskip("torch")
    assert sanitizer.find() is None
    reason = sanitizer.missing_reason()
    if torch.version.cuda is None:
        assert "CPU build" in reason
    else:
        assert "nvidia-cuda-sanitizer-api" in reason and f"=={torch.version.cuda}.*" in reason
        assert "CUDA toolkit" in reason
    monkeypatch.setattr(torch.version, "cuda", "12.4")
    assert sanitizer.install_hint() == 'pip install "nvidia-cuda-sanitizer-api-cu12==12.4.*"'
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    assert sanitizer.install_hint() == 'pip install "nvidia-cuda-sanitizer-api==13.0.*"'
    with pytest.raises(FileNotFoundError, match="nvidia-cuda-sanitizer-api"):
        sanitizer.run(["true"])


# --------------------------------------------------------------------------------------------------
# Running (a fake compute-sanitizer: a shell script that records how it was called and prints a report)
# --------------------------------------------------------------------------------------------------


CAT, SLEEP = shutil.which("cat"), shutil.which("sleep")  # found now: the tests below take PATH away


def _canned(tmp_path: Path, report: str, status: int = 0, before: str = "") -> Path:
    (tmp_path / "report.txt").write_text(report)
    body = f"""\
        printf '%s\\n' "$@" > "{tmp_path}/args.txt"
        echo "$PYTORCH_NO_CUDA_MEMORY_CACHING $COURSE_MARK" > "{tmp_path}/env.txt"
        {before}
        {CAT} "{tmp_path}/report.txt"
        exit {status}"""
    return _fake_tool(tmp_path / "bin" / "compute-sanitizer", textwrap.dedent(body))


def test_run_calls_the_tool_with_the_program_and_turns_pytorchs_caching_allocator_off(nowhere, monkeypatch, tmp_path):
    _canned(tmp_path, RACECHECK)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    report = sanitizer.run([sys.executable, "-c", "pass"], "racecheck", env={"COURSE_MARK": "x"}, extra=["--foo"])
    args = (tmp_path / "args.txt").read_text().splitlines()
    assert args[:2] == ["--tool", "racecheck"] and args[-4:] == ["--foo", sys.executable, "-c", "pass"]
    assert (
        "--print-limit" in args and "application-only" in args and args[args.index("--report-api-errors") + 1] == "no"
    )
    assert (tmp_path / "env.txt").read_text().split() == ["1", "x"]
    assert report.tool == "racecheck" and report.returncode == 0 and not report.timed_out
    assert (report.error_count, report.warning_count, len(report.errors)) == (1, 1, 2)
    assert not report.ok and report.errors[0].location.endswith("bias_grad.cuh:65")
    assert report.command[0] == str(tmp_path / "bin" / "compute-sanitizer")


def test_run_can_leave_pytorchs_caching_allocator_on_to_show_what_it_hides(nowhere, monkeypatch, tmp_path):
    monkeypatch.setenv("PYTORCH_NO_CUDA_MEMORY_CACHING", "1")
    sanitizer.run(["prog"], sanitizer=_canned(tmp_path, CLEAN), env={"COURSE_MARK": "y"}, caching=True)
    assert (tmp_path / "env.txt").read_text().split() == ["y"]


def test_run_reports_the_programs_exit_status_and_a_clean_run_is_ok(nowhere, tmp_path):
    exe = _canned(tmp_path, CLEAN, status=3)
    report = sanitizer.run(["prog"], sanitizer=exe)
    assert report.returncode == 3 and report.error_count == 0 and not report.ok
    exe = _canned(tmp_path, CLEAN)
    assert sanitizer.run(["prog"], "initcheck", sanitizer=exe).ok


def test_run_stops_a_program_that_runs_past_its_timeout(nowhere, tmp_path):
    exe = _canned(tmp_path, CLEAN, before=f"{SLEEP} 30")
    report = sanitizer.run(["prog"], sanitizer=exe, timeout=1)
    assert report.timed_out and report.returncode is None and not report.ok and report.seconds < 20
    assert "timed out" in report.summary()


def test_an_unknown_tool_is_refused():
    with pytest.raises(ValueError, match="memcheck, racecheck, initcheck, synccheck"):
        sanitizer.command(["prog"], "leakcheck", sanitizer="cs")


# --------------------------------------------------------------------------------------------------
# helpers.selfcheck.sanitized: an exercise's self-check under the sanitizer
# --------------------------------------------------------------------------------------------------


def test_sanitized_without_a_gpu_says_why_and_returns_none(monkeypatch, capsys):
    monkeypatch.setattr(env, "cuda_mode", lambda: False)
    assert selfcheck.sanitized("bias_grad") is None
    assert "CPU mode (no GPU); skipped" in capsys.readouterr().out


def test_sanitized_without_the_tool_says_how_to_install_it(monkeypatch, capsys):
    monkeypatch.setattr(env, "cuda_mode", lambda: True)
    monkeypatch.setattr(sanitizer, "find", lambda: None)
    monkeypatch.setattr(sanitizer, "missing_reason", lambda: "compute-sanitizer was not found (pip install it).")
    assert selfcheck.sanitized("bias_grad") is None
    assert "bias_grad: skipped under compute-sanitizer. compute-sanitizer was not found" in capsys.readouterr().out


def test_racecheck_runs_where_the_exercises_kernel_code_declares_shared_memory(monkeypatch, tmp_path):
    monkeypatch.setattr(env, "KERNELS", tmp_path)
    (tmp_path / "solutions").mkdir()
    (tmp_path / "exercises").mkdir()
    (tmp_path / "solutions" / "ex.cuh").write_text("__global__ void k() {\n  __shared__ float s[32];\n}\n")
    (tmp_path / "exercises" / "ex.cuh").write_text(
        "// uses __shared__ memory\n/* a __shared__ tile */\n__global__ void k() {}\n"
    )
    (tmp_path / "exercises" / "glue.h").write_text("__shared__  // a C++ header is no kernel file\n")
    assert selfcheck.sanitizer_tools("ex", solutions=True) == ["memcheck", "racecheck"]
    assert selfcheck.sanitizer_tools("ex", solutions=False) == ["memcheck"]  # only in comments
    assert selfcheck.sanitizer_tools("glue", solutions=False) == ["memcheck"]
    monkeypatch.setenv("COURSE_SOLUTIONS", "1")
    assert selfcheck.uses_shared_memory("ex")


def test_the_course_exercises_racecheck_follows_the_answer_not_the_stub():
    assert selfcheck.sanitizer_tools("bias_grad", solutions=True) == ["memcheck", "racecheck"]
    assert selfcheck.sanitizer_tools("bias_grad", solutions=False) == ["memcheck"]  # the stub declares none yet
    assert selfcheck.sanitizer_tools("polynomial_forward", solutions=True) == ["memcheck"]


@pytest.mark.parametrize("solutions", ["0", "1"])
def test_the_sanitized_child_reruns_the_check_on_the_gpu_with_the_seed_and_this_processs_solutions(
    monkeypatch, solutions
):
    monkeypatch.setenv("COURSE_SOLUTIONS", solutions)
    argv, child = selfcheck.sanitized_command("bias_grad", 1234)
    assert argv == [
        sys.executable,
        "-c",
        "from helpers.exercises import bias_grad as m; m.check(device='cuda', seed=1234)",
    ]
    assert child["COURSE_SOLUTIONS"] == solutions and str(env.REPO_ROOT) in child["PYTHONPATH"].split(os.pathsep)
    with pytest.raises(ValueError):
        selfcheck.sanitized_command("bias_grad; import os", 1)


def _sanitize_with(monkeypatch, text: str, status: int = 0):
    """sanitized() with a GPU and a tool, whose run returns the report of `text`; the runs it asked for."""
    calls = []

    def fake_run(argv, tool, **kw):
        calls.append((argv, tool, kw))
        found, count, warnings, notes = sanitizer.parse(text, tool)
        return sanitizer.Report(tool, status, 4.0, found, count, warnings, notes, text)

    monkeypatch.setattr(env, "cuda_mode", lambda: True)
    monkeypatch.setattr(sanitizer, "find", lambda: Path("/fake/compute-sanitizer"))
    monkeypatch.setattr(sanitizer, "run", fake_run)
    return calls


def test_a_sanitizer_finding_fails_the_check_naming_exercise_tool_and_source_line(monkeypatch, capsys):
    calls = _sanitize_with(monkeypatch, RACECHECK)
    with pytest.raises(AssertionError) as e:
        selfcheck.sanitized("bias_grad", tool="racecheck", seed=77)
    msg = str(e.value)
    assert msg.startswith("bias_grad: not yet. Under compute-sanitizer racecheck, 1 error, 1 warning")
    assert "The first: Race reported between write access and read access" in msg
    assert f"at {ROOT}/kernels/solutions/bias_grad.cuh:65" in msg or "at kernels/solutions/bias_grad.cuh:65" in msg
    assert "__syncthreads()" in msg and "(The self-check ran with seed=77.)" in msg
    assert [tool for _, tool, _ in calls] == ["racecheck"] and "seed=77" in calls[0][0][-1]
    assert calls[0][2]["env"]["PYTHONPATH"] and "❌ racecheck: 1 error, 1 warning" in capsys.readouterr().out


def test_a_check_that_fails_under_the_sanitizer_without_a_finding_says_to_run_it_plainly(monkeypatch):
    _sanitize_with(monkeypatch, CLEAN, status=1)
    with pytest.raises(AssertionError, match="the self-check itself failed .exit status 1. and the tool found nothing"):
        selfcheck.sanitized("polynomial_forward", seed=1)


def test_a_clean_run_of_every_tool_passes_and_returns_the_reports(monkeypatch, capsys):
    monkeypatch.setenv("COURSE_SOLUTIONS", "1")
    calls = _sanitize_with(monkeypatch, CLEAN)
    reports = selfcheck.sanitized("bias_grad", seed=5)
    assert [r.tool for r in reports] == ["memcheck", "racecheck"] == [tool for _, tool, _ in calls]
    assert all(r.ok for r in reports)
    assert "✅ bias_grad: compute-sanitizer memcheck and racecheck found no errors." in capsys.readouterr().out


# --------------------------------------------------------------------------------------------------
# benchmarks/sanitize_sweep.py: the drivers (listed here, run on the GPU) and the sweep (a fake tool here)
# --------------------------------------------------------------------------------------------------


def test_every_op_in_helpers_ops_has_a_driver():
    from benchmarks import sanitize_sweep
    from helpers import ops

    assert sorted(sanitize_sweep.DRIVERS) == ops.op_modules()


def test_the_sanitize_sweep_is_not_mistaken_for_a_benchmark():
    from benchmarks import run

    assert "sanitize_sweep" not in run.benchmark_names()


@pytest.mark.parametrize(
    "op", ["add_norm", "dropout", "fused_bias_relu", "layernorm", "norm_dropout", "polynomial", "rmsnorm"]
)
def test_each_driver_lists_its_cases_in_every_dtype_without_a_gpu(op, capsys):
    from benchmarks import sanitize_sweep

    assert sanitize_sweep.main(["--driver", op, "--list", "--arch", "90"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines and all(line.startswith("case ") for line in lines)
    assert lines[0].startswith(f"case 1/{len(lines)}: {op} ") and lines[-1].startswith(f"case {len(lines)}/")
    for dtype in ("float32", "float64", "float16", "bfloat16"):
        assert any(f" {dtype} " in line for line in lines), dtype


def test_the_hopper_paths_are_listed_for_sm_90_only(capsys):
    from benchmarks import sanitize_sweep

    hopper = {}
    for arch in (80, 90):
        sanitize_sweep.main(["--driver", "rmsnorm", "--list", "--arch", str(arch)])
        hopper[arch] = capsys.readouterr().out
    for kernel in ("forward_bulk_kernel", "backward_bulk_kernel", "backward_v2_bulk_kernel<kRms>", "over a cluster"):
        assert kernel in hopper[90]
    assert "forward_bulk_kernel" not in hopper[80] and "backward_v2_bulk_kernel" not in hopper[80]
    assert "backward_long_rows_kernel" in hopper[80] and "misaligned" in hopper[80]


def test_the_layernorm_driver_runs_every_version_and_every_kernel_choice(capsys):
    from benchmarks import sanitize_sweep

    labels = [c.label() for c in sanitize_sweep.cases("layernorm", sanitize_sweep.Device())]
    for variant in ("v1 ", "v2 ", "v3 ", "v3 and v2 kernels ", "op ", "op no weight ", "op float32 weight "):
        assert any(label.startswith(variant) for label in labels), variant
    assert any("ladder forward v3 and backward v2" in label for label in labels)


def _sweep_tool(tmp_path: Path) -> Path:
    """A compute-sanitizer that runs nothing and reports a race under racecheck, a clean run otherwise."""
    (tmp_path / "race.txt").write_text(RACECHECK)
    (tmp_path / "clean.txt").write_text(CLEAN)
    body = f'if [ "$2" = racecheck ]; then {CAT} "{tmp_path}/race.txt"; else {CAT} "{tmp_path}/clean.txt"; fi'
    return _fake_tool(tmp_path / "bin" / "compute-sanitizer", body)


def test_the_sweep_runs_each_driver_alone_then_under_each_tool_and_fails_on_a_finding(tmp_path, capsys):
    from benchmarks import sanitize_sweep as sw

    out = tmp_path / "out"
    argv_of = lambda op: [sys.executable, "-c", f"print('case 1/1: {op}')"]  # noqa: E731
    results = sw.run_sweep(
        ["memcheck", "racecheck"], ["dropout", "rmsnorm"], out, jobs=2, argv_of=argv_of, exe=_sweep_tool(tmp_path)
    )
    assert [(r.op, r.tool) for r in results] == [
        ("dropout", "plain"), ("rmsnorm", "plain"),
        ("dropout", "memcheck"), ("dropout", "racecheck"), ("rmsnorm", "memcheck"), ("rmsnorm", "racecheck"),
    ]  # fmt: skip
    assert [r.ok for r in results] == [True, True, True, False, True, False]
    assert (out / "plain-dropout.log").read_text() == "case 1/1: dropout\n"
    assert "RACECHECK SUMMARY" in (out / "racecheck-rmsnorm.log").read_text()
    saved = json.loads((out / "sanitize.json").read_text())
    race = next(r for r in saved["results"] if (r["op"], r["tool"]) == ("rmsnorm", "racecheck"))
    assert (race["errors"], race["warnings"], race["ok"]) == (1, 1, False)
    assert race["findings"][0]["kind"] == "race" and race["findings"][0]["location"].endswith("bias_grad.cuh:65")
    assert sw.report(results, ["memcheck", "racecheck"], ["dropout", "rmsnorm"], out) == 1
    shown = capsys.readouterr().out
    assert "dropout" in shown and "1 err+1w" in shown and "0 err" in shown and "4 of 6 runs clean" in shown
    assert "❌ racecheck: 1 error, 1 warning" in shown


def test_a_driver_that_fails_alone_is_reported_and_not_sanitized(tmp_path, capsys):
    from benchmarks import sanitize_sweep as sw

    argv_of = lambda op: [sys.executable, "-c", "raise SystemExit(3)"]  # noqa: E731
    results = sw.run_sweep(["memcheck"], ["polynomial"], tmp_path / "out", argv_of=argv_of, exe=_sweep_tool(tmp_path))
    assert [(r.tool, r.ok, r.returncode) for r in results] == [("plain", False, 3)]
    assert sw.report(results, ["memcheck"], ["polynomial"], tmp_path / "out") == 1
    shown = capsys.readouterr().out
    assert "FAILED" in shown and "skipped" in shown


def test_the_sweep_without_a_gpu_checks_nothing_and_fails(monkeypatch, capsys):
    from benchmarks import sanitize_sweep as sw

    monkeypatch.setattr(env, "cuda_mode", lambda: False)
    assert sw.main(["--ops", "dropout"]) == 1
    assert "no GPU here" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        sw.main(["--ops", "nosuchop"])
