"""helpers.profile on the CPU: a real torch.profiler run of the small model, the timeline, the GPU-only parts
refusing with a reason, the verdict rules, and Nsight Compute's output parsed from canned text and a fake ncu."""

import io
import json
import os
import stat
from types import SimpleNamespace

import pytest
import torch

from helpers import env, profile


@pytest.fixture
def one_thread():
    """One intra-op thread: on a busy 2-core machine OpenMP threads waiting on each other make an 800 us step
    take 100x that under the profiler; the test is about what is counted, not how fast."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def step(tmp_path_factory):
    torch.manual_seed(0)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    model = profile.small_model(dim=64, hidden=128, device="cpu")
    trace = tmp_path_factory.mktemp("profile") / "trace.json"
    try:
        yield model, profile.model_step_profile(model, model.example_input(16), steps=3, trace_path=trace)
    finally:
        torch.set_num_threads(before)


def test_a_cpu_training_step_counts_operators_and_its_shares_add_up_to_100_percent(step):
    model, p = step
    assert p.device == "cpu" and p.backward and p.what == "CPU operators"
    assert p.kernels_per_step > 0 and len(p.launches) == p.kernels_per_step
    assert abs(sum(r.share for r in p.rows) - 100) < 0.01
    assert [r.share for r in p.rows] == sorted((r.share for r in p.rows), reverse=True)
    assert {"aten::mm", "aten::addmm"} & {r.name for r in p.rows}  # the forward's and the backward's matmuls
    assert p.step_us > 0 and p.profiled_step_us > 0
    assert all(param.grad is None for param in model.parameters())  # the weights' gradients are left unset


def test_the_cpu_launches_of_a_step_are_top_level_operators_that_move_data_in_order(step):
    _, p = step
    names = [b.name for b in p.launches]
    assert names[:3] == ["aten::layer_norm", "aten::linear", "aten::relu"]  # the first block's forward
    assert "aten::threshold_backward" in names  # and the backward's
    assert not {"aten::t", "aten::view", "aten::transpose"} & set(names)  # views: no kernel on a GPU
    assert [b.start_us for b in p.launches] == sorted(b.start_us for b in p.launches)
    assert all(0 <= b.start_us <= b.end_us for b in p.launches) and not any(b.course for b in p.launches)


def test_the_trace_is_a_chrome_trace_file(step):
    _, p = step
    assert p.trace_path.name == "trace.json" and p.trace_path.is_file()
    trace = json.loads(p.trace_path.read_text())
    assert any(e.get("name") == profile.STEP for e in trace["traceEvents"])


def test_the_table_lists_the_largest_shares_and_sums_up_the_rest(step):
    _, p = step
    lines = p.table(limit=3).splitlines()
    assert "CPU operators per training step" in lines[0]
    assert lines[1].split() == ["op", "calls", "self", "CPU", "us", "share"]
    assert len(lines) == 2 + 3 + 1 and lines[-1].startswith(f"({len(p.rows) - 3} more)")


def test_an_inference_step_runs_no_backward(one_thread):
    model = profile.small_model(dim=32, hidden=64, depth=1, activation="gelu", norm="rms", device="cpu")
    p = profile.model_step_profile(model, model.example_input(8), steps=2, backward=False, warmup=1)
    assert not p.backward and p.kernels_per_step > 0
    assert not any("backward" in b.name for b in p.launches)
    assert "aten::gelu" in [b.name for b in p.launches]


def test_the_timeline_draws_one_bar_per_launch(step):
    import matplotlib

    matplotlib.use("Agg")
    _, p = step
    fig = profile.timeline(p)
    ax = fig.axes[0]
    assert len(ax.containers) == len(p.launches)  # one barh per launch
    assert "one step" in ax.get_title() and "CPU" in ax.get_xlabel()
    assert {"matmul", "norm"} <= {t.get_text() for t in ax.get_legend().get_texts()}
    fig.savefig(io.BytesIO(), format="png")


def _event(name, device, start, end, parent=None, kernels=()):
    return SimpleNamespace(
        name=name,
        device_type=SimpleNamespace(name=device),
        time_range=SimpleNamespace(start=start, end=end),
        cpu_parent=parent,
        cpu_children=[],
        kernels=[SimpleNamespace(name=k, device=0, duration=d) for k, d in kernels],
        is_user_annotation=False,
    )


def test_a_kernel_is_attributed_to_the_op_that_launched_it_and_marked_when_a_course_op_did():
    step = _event(profile.STEP, "CPU", 0.0, 100.0)
    outer = _event("course::rms_norm", "CPU", 5.0, 20.0, parent=step)
    inner = _event("course::rms_norm_forward", "CPU", 6.0, 19.0, parent=outer, kernels=[("rms_kernel", 8.0)])
    mm = _event("aten::mm", "CPU", 21.0, 30.0, parent=step, kernels=[("sm90_xmma_gemm", 12.5)])
    kernels = [_event("rms_kernel", "CUDA", 30.0, 38.0), _event("sm90_xmma_gemm", "CUDA", 40.0, 52.5)]
    gpu_copy_of_the_step = _event(profile.STEP, "CUDA", 30.0, 52.5)
    prof = SimpleNamespace(events=lambda: [step, outer, inner, mm, *kernels[::-1], gpu_copy_of_the_step])
    [(us, launches)] = profile._steps(prof, gpu=True)
    assert us == 100.0
    assert [(b.name, b.op, b.course, b.start_us, b.end_us) for b in launches] == [
        ("rms_kernel", "course::rms_norm_forward", True, 30.0, 38.0),
        ("sm90_xmma_gemm", "aten::mm", False, 40.0, 52.5),
    ]


def test_on_a_gpu_an_ops_share_is_its_kernel_time_and_the_rest_is_the_gpu_waiting():
    def avg(key, gpu_us, cpu_us, count=2, device="CPU"):
        kind = SimpleNamespace(name=device)
        return SimpleNamespace(
            key=key, device_type=kind, self_device_time_total=gpu_us, self_cpu_time_total=cpu_us, count=count
        )

    events = [avg("aten::mm", 60, 10), avg("course::rms_norm_forward", 20, 6), avg(profile.STEP, 0, 40)]
    events += [avg("cudaLaunchKernel", 0, 8, 4), avg("sm90_xmma_gemm", 60, 0, device="CUDA")]
    rows = profile._rows(SimpleNamespace(key_averages=lambda: events), steps=2, step_us=100.0, gpu=True)
    assert [(r.name, r.calls, r.self_us, r.cpu_us, r.share) for r in rows] == [
        ("(GPU idle: waiting for the CPU)", 0, 60.0, 0.0, 60.0),
        ("aten::mm", 1.0, 30.0, 5.0, 30.0),
        ("course::rms_norm_forward", 1.0, 10.0, 3.0, 10.0),
    ]


def test_bound_returns_none_with_a_reason_on_the_cpu(capsys):
    assert profile.bound(lambda: None, bytes_moved=1 << 20, flops=0, device="cpu") is None
    assert "CPU mode" in capsys.readouterr().out


def test_the_verdict_rules_apply_in_order_launch_memory_compute():
    assert profile.verdict(4.0, 25.0, 90.0, 80.0)[0] is profile.Verdict.LAUNCH  # launch wins over everything
    kind, rule = profile.verdict(100.0, 120.0, 91.0, 1.0)
    assert kind is profile.Verdict.MEMORY and "91 % of a copy" in rule
    assert profile.verdict(100.0, 120.0, 20.0, 70.0)[0] is profile.Verdict.COMPUTE
    assert profile.verdict(100.0, 120.0, 20.0, 10.0)[0] is profile.Verdict.NEITHER
    kind, rule = profile.verdict(100.0, 120.0, 20.0, None)
    assert kind is profile.Verdict.NEITHER and "unknown peak" in rule


def test_bound_describes_itself_in_one_line():
    b = profile.Bound(
        "NVIDIA H100 80GB HBM3", 10.0, 12.0, 3000.0, 3100.0, 96.8, 0.1, 67.0, 0.15, "the H100 SXM's dense FP32 peak",
        *profile.verdict(10.0, 12.0, 96.8, 0.15),
    )  # fmt: skip
    line = b.describe()
    assert "\n" not in line and line.startswith("memory-bound: 97 % of a copy") and "3000 GB/s" in line


@pytest.mark.parametrize(
    "name, dtype, peak",
    [
        ("Tesla T4", torch.float32, 8.1),
        ("Tesla T4", torch.float16, 65.0),
        ("NVIDIA A100-SXM4-80GB", torch.bfloat16, 312.0),
        ("NVIDIA H100 80GB HBM3", torch.bfloat16, 989.0),
        ("NVIDIA H100 PCIe", torch.float32, 51.0),
        ("NVIDIA H200", torch.float32, 67.0),
        ("NVIDIA L4", torch.float32, 30.3),
        ("NVIDIA L40S", torch.float32, None),  # not an L4
        ("NVIDIA H100 80GB HBM3", torch.float64, None),
    ],
)
def test_peaks_are_looked_up_by_the_cards_name(name, dtype, peak):
    value, note = profile.peak_tflops(name, dtype)
    assert value == peak and note


NCU_CSV = """\
==PROF== Connected to process 4242 (/usr/bin/python3.11)
==PROF== Profiling "rms_norm_forward_kernel" - 0: 0%....50%....100% - 3 passes
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","4242","python3.11","127.0.0.1","void rms_norm_forward_kernel<float, 4>(const float *, float *, int)","1","7","(256, 1, 1)","(8192, 1, 1)","0","9.0","Command line profiler metrics","dram__throughput.avg.pct_of_peak_sustained_elapsed","%","91.53"
"0","4242","python3.11","127.0.0.1","void rms_norm_forward_kernel<float, 4>(const float *, float *, int)","1","7","(256, 1, 1)","(8192, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","usecond","23.58"
"1","4242","python3.11","127.0.0.1","triton_red_fused_0","1","7","(512, 1, 1)","(8192, 1, 1)","0","9.0","Command line profiler metrics","dram__throughput.avg.pct_of_peak_sustained_elapsed","%","88.10"
"1","4242","python3.11","127.0.0.1","triton_red_fused_0","1","7","(512, 1, 1)","(8192, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","nsecond","24,192"
==PROF== Disconnected from process 4242
"""

NOT_PERMITTED = """\
==PROF== Connected to process 4242 (/usr/bin/python3.11)
==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters on the target device 0. For instructions on enabling permissions and to get more information see https://developer.nvidia.com/ERR_NVGPUCTRPERM
==PROF== Disconnected from process 4242
==WARNING== No kernels were profiled.
"""


def test_ncu_csv_is_read_per_launch_with_the_duration_in_microseconds():
    rows = profile.parse_ncu_csv(NCU_CSV)
    assert [(r["id"], r["kernel"][:28], r["dram_pct"]) for r in rows] == [
        (0, "void rms_norm_forward_kernel", 91.53),
        (1, "triton_red_fused_0", 88.10),
    ]
    assert rows[0]["time_us"] == pytest.approx(23.58) and rows[1]["time_us"] == pytest.approx(24.192)
    assert profile.ncu_failure(NCU_CSV) is None


def test_ncu_values_with_a_decimal_comma_or_no_value_are_read():
    assert profile._number("9,50") == 9.5 and profile._number("1,024.5") == 1024.5
    assert profile._number("(!) n/a") is None


def test_err_nvgpuctrperm_is_recognised_and_explained():
    status, reason = profile.ncu_failure(NOT_PERMITTED, returncode=1)
    assert status is profile.NcuStatus.NOT_PERMITTED and profile.parse_ncu_csv(NOT_PERMITTED) == []
    for words in ("performance counters", "NVreg_RestrictProfilingToAdminUsers=0", "torch.profiler", "Colab"):
        assert words in reason


def test_an_ncu_run_that_profiled_nothing_or_failed_says_so():
    nothing = "==PROF== Disconnected from process 1\n==WARNING== No kernels were profiled.\n"
    assert profile.ncu_failure(nothing)[0] is profile.NcuStatus.NO_KERNELS
    status, reason = profile.ncu_failure("==ERROR== Failed to profile kernel\n", returncode=1)
    assert status is profile.NcuStatus.FAILED and "Failed to profile kernel" in reason


def _fake_ncu(folder, *, stdout="", stderr="", rc=0, version_rc=0):
    """An `ncu` in `folder` that prints a version, or the given output (and keeps its arguments in args)."""
    (folder / "out").write_text(stdout)
    (folder / "err").write_text(stderr)
    ncu = folder / "ncu"
    ncu.write_text(
        "#!/bin/sh\n"
        'here=$(dirname "$0")\n'
        'printf "%s\\n" "$@" > "$here/args"\n'
        'if [ "$1" = "--version" ]; then\n'
        '  echo "NVIDIA (R) Nsight Compute Command Line Profiler"\n'
        '  echo "Version 2025.3.1.0 (build 36398880) (public-release)"\n'
        f"  exit {version_rc}\n"
        "fi\n"
        'cat "$here/out"; cat "$here/err" >&2\n'
        f"exit {rc}\n"
    )
    ncu.chmod(ncu.stat().st_mode | stat.S_IXUSR)
    return ncu


@pytest.fixture
def path_with(tmp_path, monkeypatch):
    """PATH holding only tmp_path (and the shell), with no other place for ncu."""
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}/bin{os.pathsep}/usr/bin")
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.setattr(profile, "NCU_PLACES", ())
    return tmp_path


def test_ncu_available_finds_an_ncu_on_path_and_names_its_version(path_with):
    ncu = _fake_ncu(path_with)
    assert profile.ncu_available() == (True, f"Version 2025.3.1.0 (build 36398880) (public-release) at {ncu}")


def test_ncu_available_says_why_not_without_ncu_or_when_it_does_not_run(path_with):
    ok, why = profile.ncu_available()
    assert not ok and "not installed" in why
    _fake_ncu(path_with, version_rc=3)
    ok, why = profile.ncu_available()
    assert not ok and "exit 3" in why


def test_ncu_memory_throughput_returns_the_permission_reason_instead_of_raising(path_with, monkeypatch, capsys):
    monkeypatch.setattr(env, "cuda_mode", lambda: True)
    _fake_ncu(path_with, stderr=NOT_PERMITTED, rc=1)
    result = profile.ncu_memory_throughput("import torch", "rms_norm|triton")
    assert result["status"] is profile.NcuStatus.NOT_PERMITTED and result["kernels"] == []
    assert "NVreg_RestrictProfilingToAdminUsers=0" in capsys.readouterr().out
    args = (path_with / "args").read_text().splitlines()
    assert args[args.index("--metrics") + 1] == ",".join(profile.NCU_METRICS)
    assert "regex:rms_norm|triton" in args and args[-2:] == ["-c", "import torch"]


def test_ncu_memory_throughput_reads_the_kernels_of_a_run(path_with, monkeypatch):
    monkeypatch.setattr(env, "cuda_mode", lambda: True)
    _fake_ncu(path_with, stdout=NCU_CSV)
    result = profile.ncu_memory_throughput(["python", "bench.py"], "rms_norm", launch_count=2)
    assert result["status"] is profile.NcuStatus.OK and result["reason"] == ""
    assert [r["dram_pct"] for r in result["kernels"]] == [91.53, 88.10]
    assert "--launch-count 2" in result["command"] and result["command"].endswith("python bench.py")


def test_ncu_memory_throughput_returns_none_with_a_reason_on_the_cpu(monkeypatch, capsys):
    monkeypatch.setattr(env, "cuda_mode", lambda: False)
    assert profile.ncu_memory_throughput("pass", "x") is None
    assert "CPU mode" in capsys.readouterr().out
