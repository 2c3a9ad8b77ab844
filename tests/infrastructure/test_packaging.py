"""Lesson 06's package: setup.py builds the loader's own sources (no copies) with the exercise solutions (or one
op from a learner's entry file, COURSE_ENTRY), pyproject.toml declares the build without losing its tool
sections, and a wheel built with `pip wheel --no-build-isolation`, installed into an empty folder, imports in a
new process that cannot see the course folder and passes opcheck there (a CPU-only wheel in CI; the GPU run
builds it for the card).

The wheel of this file and notebook 06's share one build folder in the build cache (the same configuration):
whichever runs first compiles, the other relinks and zips."""

import importlib
import importlib.util
import shutil
import sys
import types
import zipfile

import pytest
import tomllib

from helpers import env, loader, wheel
from helpers import ops as course_ops_helpers

ROOT = env.REPO_ROOT
CUDA = env.cuda_mode()


@pytest.fixture(scope="module")
def setup_py():
    spec = importlib.util.spec_from_file_location("course_setup", ROOT / "setup.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # defines the functions; building happens only under __main__
    return module


def test_pyproject_declares_the_build_and_keeps_its_tool_sections():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["build-system"]["build-backend"] == "setuptools.build_meta"
    assert any(r.startswith("torch") for r in project["build-system"]["requires"])
    assert project["project"]["name"] == "course-ops"
    torch_pin = [d for d in project["project"]["dependencies"] if d.startswith("torch")]
    lines = [line.split("#")[0].strip() for line in (ROOT / "requirements.txt").read_text().splitlines()]
    assert torch_pin == [line for line in lines if line.startswith("torch")], "the wheel pins the torch set-up installs"
    assert project["tool"]["ruff"]["line-length"] == 120 and project["tool"]["pytest"]["ini_options"]["testpaths"]


def test_every_registered_op_with_python_registrations_is_packaged(setup_py, monkeypatch):
    monkeypatch.delenv("COURSE_OPS", raising=False)
    ops = setup_py.packaged_ops()
    assert "polynomial" in ops
    for name in ops:
        assert "COURSE_LIBRARY(" in (env.KERNELS / name / f"{name}.cpp").read_text()
        assert hasattr(importlib.import_module(f"helpers.ops.{name}"), "register")


def test_course_ops_naming_an_unknown_op_is_refused_with_the_choices(setup_py, monkeypatch):
    monkeypatch.setenv("COURSE_OPS", "polynomial,nosuchop")
    with pytest.raises(SystemExit, match="'nosuchop', which is not one of the packaged ops: .*polynomial"):
        setup_py.packaged_ops()


@pytest.mark.parametrize("cuda", [True, False], ids=["cuda", "cpu-only"])
def test_each_op_is_built_from_the_loaders_sources_with_the_solutions(setup_py, cuda):
    for name in setup_py.packaged_ops():
        ext = setup_py.extension_for(name, cuda=cuda, debug=False)
        assert ext.name == f"course_ops.{name}"
        want = [s for s in loader.sources_for(name) if cuda or s.suffix != ".cu"]
        assert [ROOT / s for s in ext.sources] == want
        assert ext.include_dirs[:2] == [str(env.KERNELS / "solutions"), str(env.KERNELS)]
        assert str(env.KERNELS / "exercises") not in ext.include_dirs
        assert (("WITH_CUDA", None) in ext.define_macros) == cuda


@pytest.mark.parametrize("cuda", [True, False], ids=["cuda", "cpu-only"])
def test_an_entry_file_builds_one_op_with_its_sources_relative_and_its_python_side(setup_py, monkeypatch, cuda):
    """COURSE_ENTRY (lesson 06's exercise): the learner's extension() is called with kernels/ and the exercise
    files' folder; setup.py makes its sources relative, and the build folder is one of its own."""
    monkeypatch.setenv("COURSE_ENTRY", str(env.KERNELS / "solutions" / "wheel_square.py"))
    monkeypatch.setenv("COURSE_HEADERS", str(env.KERNELS / "solutions"))
    module, headers = setup_py.entry()
    assert headers == env.KERNELS / "solutions"
    ext = setup_py.entry_extension(module, headers, cuda=cuda, debug=False)
    assert ext.name == "course_ops.square"
    assert sorted(ROOT / s for s in ext.sources) == sorted(
        s for s in loader.sources_for("square") if cuda or s.suffix != ".cu"
    )
    assert not any(s.startswith("/") for s in ext.sources), "setuptools wants sources relative to setup.py"
    assert ext.extra_compile_args == setup_py.compile_args(cuda, debug=False)
    assert all((headers / f).is_file() for f in module.PYTHON_SIDE)
    monkeypatch.delenv("COURSE_ENTRY")
    assert setup_py.entry() is None


def test_debug_builds_device_code_with_G_and_release_with_lineinfo(setup_py):
    release = setup_py.extension_for("polynomial", cuda=True, debug=False).extra_compile_args["nvcc"]
    debug = setup_py.extension_for("polynomial", cuda=True, debug=True).extra_compile_args["nvcc"]
    assert "-lineinfo" in release and "-G" not in release
    assert "-G" in debug and "-lineinfo" not in debug


def test_helpers_ops_uses_the_installed_module_once_course_ops_is_imported(monkeypatch):
    prebuilt = types.SimpleNamespace(extensions={"polynomial": object()})
    monkeypatch.setitem(sys.modules, "course_ops", prebuilt)
    course_ops_helpers.extension.cache_clear()
    try:
        assert course_ops_helpers.extension("polynomial") is prebuilt.extensions["polynomial"]
    finally:
        course_ops_helpers.extension.cache_clear()


def test_course_ops_without_built_libraries_says_how_to_get_them(tmp_path):
    """The package as it is in the source folder (a copy: an editable install leaves libraries in the real one)."""
    (tmp_path / "course_ops").mkdir()
    shutil.copy(ROOT / "course_ops" / "__init__.py", tmp_path / "course_ops")
    with pytest.raises(wheel.WheelError, match=r"holds no built op: install the wheel \(`pip wheel"):
        wheel.check_installed(tmp_path)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """polynomial as a wheel: CPU-only in CI, for this GPU on a GPU machine."""
    out = tmp_path_factory.mktemp("wheel")
    w = wheel.build(out / "dist", ops=["polynomial"], cuda=CUDA)
    return w, wheel.install(w.path, out / "site")


def test_the_wheel_holds_the_op_and_its_python_side_and_pins_torch(built):
    w, _ = built
    with zipfile.ZipFile(w.path) as z:
        names = z.namelist()
        metadata = next(z.read(n).decode() for n in names if n.endswith(".dist-info/METADATA"))
    assert any(n.startswith("course_ops/polynomial.") and n.endswith(".so") for n in names)
    assert "course_ops/ops/polynomial.py" in names and "course_ops/__init__.py" in names
    assert not any(n.startswith(("kernels/", "tests/", "notebooks/", "helpers/")) for n in names), "one package"
    assert "Requires-Dist: torch==2.11.*" in metadata


def test_installed_wheel_imports_and_passes_opcheck_in_a_fresh_process(built):
    _, site = built
    report = wheel.check_installed(site)  # raises if anything came from outside `site`
    assert report["ops"] == ["polynomial"]
    devices = ["cpu", "cuda"] if CUDA else ["cpu"]
    assert report["checked"] == [f"{op} ({d})" for op in ("polynomial", "polynomial_backward") for d in devices]


def test_stable_abi_table_names_what_our_glue_needs_and_the_stable_abi_lacks():
    """Notebook 06's verdict on torch's stable ABI, checked against the torch installed here: if a later torch
    adds stable C++ autograd, this fails and the lesson's text must change."""
    rows = {r["uses"].split(":")[0]: r for r in wheel.stable_abi_table()}
    assert rows["schemas"]["stable ABI"] and rows["CPU and CUDA kernels"]["stable ABI"]
    for missing in ("C++ autograd", "autocast kernels", "the dispatcher", "typed errors"):
        assert rows[missing]["stable ABI"] is None and rows[missing]["files"] > 0, rows[missing]


def test_run_aoti_reports_a_crash_of_the_fresh_process_with_its_phase(monkeypatch, tmp_path):
    crash = "import os, signal\nprint('phase: loading the package', flush=True)\nos.kill(os.getpid(), signal.SIGSEGV)\n"
    monkeypatch.setattr(wheel, "_RUN_AOTI", crash)
    ran = wheel.run_aoti(tmp_path, tmp_path / "model.pt2", tmp_path / "x.pt", control=lambda: tmp_path / "plain.pt2")
    assert not ran.ok
    assert "crashed with SIGSEGV while loading the package" in ran.summary, ran.summary
    assert "without the course op fails the same way" in ran.summary, ran.summary
    monkeypatch.setattr(wheel, "_RUN_AOTI", "raise ValueError('no such package')")
    ran = wheel.run_aoti(tmp_path, tmp_path / "model.pt2", tmp_path / "x.pt")
    assert not ran.ok and ran.summary == "failed while starting: ValueError: no such package", ran.summary


@pytest.mark.skipif(not sys.platform.startswith("linux") or not shutil.which("g++"), reason="g++ on Linux")
def test_aoti_compiler_links_with_the_shared_cxx_runtime_only_where_gxx_would_not(monkeypatch, tmp_path):
    """Where the compiler AOTInductor uses links libstdc++ statically, wheel.aoti_compiler() gives it a g++ that
    names the shared runtime on links (-shared) and adds nothing to compiles; elsewhere it changes nothing."""
    import subprocess

    import torch._inductor.config as inductor_config
    from torch._inductor import cpp_builder

    from tests.infrastructure.test_loader import STATIC_CXX

    static = tmp_path / "bin" / "g++"
    static.parent.mkdir()
    static.write_text(STATIC_CXX)
    static.chmod(0o755)
    before = inductor_config.cpp.cxx
    monkeypatch.setattr(cpp_builder, "get_cpp_compiler", lambda: "g++")
    with wheel.aoti_compiler():
        assert inductor_config.cpp.cxx == before
    monkeypatch.setattr(cpp_builder, "get_cpp_compiler", lambda: str(static))
    src, header = tmp_path / "s.cpp", tmp_path / "h.h"
    src.write_text("#include <sstream>\nstd::string f(long n) { std::ostringstream s; s << n; return s.str(); }\n")
    header.write_text("#include <string>\n")
    with wheel.aoti_compiler():
        shim = inductor_config.cpp.cxx[1]
        assert shim != str(static) and cpp_builder._is_gcc(shim)
        subprocess.run([shim, "-x", "c++-header", str(header), "-o", str(tmp_path / "h.h.gch")], check=True)
        subprocess.run([shim, "-c", "-fPIC", str(src), "-o", str(tmp_path / "s.o")], check=True)
        subprocess.run([shim, "-shared", str(tmp_path / "s.o"), "-o", str(tmp_path / "s.so")], check=True)
    needed = subprocess.run(["readelf", "-d", str(tmp_path / "s.so")], capture_output=True, text=True).stdout
    assert "libstdc++.so" in needed
    assert inductor_config.cpp.cxx == before
