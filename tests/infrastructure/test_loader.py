"""The loader on a two-file extension: a torch binding (slow to compile, compiled once) and a plain
C++ file that the tests edit, as a learner edits a kernel."""

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import loader
from helpers.loader import toolchain

ROOT = Path(__file__).resolve().parents[2]

BINDING = """#include <torch/extension.h>
int value();
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("value", &value); }
"""


@pytest.fixture(scope="module")
def ext_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("ext")
    (d / "binding.cpp").write_text(BINDING)
    (d / "val.h").write_text("#define BASE 0\n")
    (d / "value.cpp").write_text('#include "val.h"\nint value() { return BASE + 1; }\n')
    mp = pytest.MonkeyPatch()
    mp.setenv("COURSE_CACHE", str(d / "cache"))
    mp.setenv("COURSE_PCH", "0")  # the caching rules, on their own; the PCH has its own tests below
    yield d
    mp.undo()


def build(d):
    return loader.load("toy", [d / "binding.cpp", d / "value.cpp"], cuda=False)


def test_cold_build_then_cached(ext_dir):
    m = build(ext_dir)
    assert m.value() == 1
    assert sorted(loader.last_build.compiled) == ["binding.cpp", "value.cpp"]
    again = build(ext_dir)
    assert again is m
    assert loader.last_build.compiled == [] and not loader.last_build.linked


def test_edit_recompiles_only_the_edited_file(ext_dir):
    old = build(ext_dir)
    (ext_dir / "value.cpp").write_text('#include "val.h"\nint value() { return BASE + 2; }\n')
    new = build(ext_dir)
    assert loader.last_build.compiled == ["value.cpp"]
    assert new.value() == 2
    assert old.value() == 1  # the module loaded before still works


def test_header_edit_recompiles_its_includer(ext_dir):
    (ext_dir / "val.h").write_text("#define BASE 10\n")
    m = build(ext_dir)
    assert loader.last_build.compiled == ["value.cpp"]
    assert m.value() == 12
    (ext_dir / "val.h").write_text("#define BASE 0\n")


def test_compile_error_names_file_line_and_keeps_old_module(ext_dir):
    good = build(ext_dir)
    (ext_dir / "value.cpp").write_text('#include "val.h"\nint value() { return undeclared_name; }\n')
    with pytest.raises(loader.BuildError) as e:
        build(ext_dir)
    msg = str(e.value)
    assert "value.cpp:2: error:" in msg
    assert "int value() { return undeclared_name; }" in msg  # the offending source line
    assert "still the one in use" in msg
    assert good.value() == 2
    assert e.value._render_traceback_()[0].endswith(msg.splitlines()[0])


def test_undoing_an_edit_finds_the_cached_build(ext_dir):
    (ext_dir / "value.cpp").write_text('#include "val.h"\nint value() { return BASE + 1; }\n')
    m = build(ext_dir)
    assert loader.last_build.compiled == [] and m.value() == 1


def test_stale_lock_is_removed(ext_dir, capsys):
    (ext_dir / "value.cpp").write_text('#include "val.h"\nint value() { return BASE + 3; }\n')
    lock = ext_dir / "cache" / "toy" / "lock"
    lock.write_text(f"{socket.gethostname()} 999999999 0")  # a pid that cannot exist
    assert build(ext_dir).value() == 3
    assert "stale build lock" in capsys.readouterr().out
    assert not lock.exists()


def test_missing_source_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.cpp"):
        loader.load("toy2", [tmp_path / "nope.cpp"], cuda=False)


def test_format_errors_reads_nvcc_and_gcc_styles(tmp_path):
    src = tmp_path / "k.cu"
    src.write_text("line one\n  y[i] = x[i] * undefined_thing;\nline three\n")
    log = f'{src}(2): error: identifier "undefined_thing" is undefined\n1 error detected\n'
    out = loader.format_errors(log)
    assert "k.cu:2: error: identifier" in out and "y[i] = x[i] * undefined_thing;" in out
    log = f"{src}:3:6: error: expected ';'\n"
    out = loader.format_errors(log)
    assert "k.cu:3: error: expected ';'" in out and "line three" in out and "     ^" in out


# --------------------------------------------------------------------------------------------------
# The precompiled torch headers. Small stand-ins (pybind11, and <vector> for the binding one) keep these tests
# to seconds; the real ones are the same code path with PCH_HEADER's torch headers (and PCH_BINDING's).
# --------------------------------------------------------------------------------------------------

SMALL_PCH = "#include <pybind11/pybind11.h>\n"
SMALL_BINDING = "#include <vector>\n"
GLUE = """#include <pybind11/pybind11.h>
int value();
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("value", &value); }
"""


@pytest.fixture
def pch_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("COURSE_PCH", "1")  # on by default only with 4+ cores; CI has 2
    monkeypatch.setenv("COURSE_UNITY", "0")  # as with 4+ cores: each file its own compile
    monkeypatch.setattr(toolchain, "PCH_HEADER", SMALL_PCH)
    monkeypatch.setattr(toolchain, "PCH_BINDING", SMALL_BINDING)
    for op in ("one", "two"):
        (tmp_path / f"{op}.cpp").write_text(GLUE)
        (tmp_path / f"{op}_value.cpp").write_text(f"int value() {{ return {len(op)}; }}\n")
    return tmp_path


def load_toy(d, op):
    return loader.load(op, [d / f"{op}.cpp", d / f"{op}_value.cpp"], cuda=False)


_CXX = loader._compiler_id(loader._cxx()).lower()
needs_gcc = pytest.mark.skipif(
    "clang" in _CXX or _CXX in ("missing", "unknown"), reason="precompiled headers are used with g++ only"
)


@needs_gcc
def test_pch_is_built_once_and_reused_by_a_second_op(pch_dir, capsys):
    assert load_toy(pch_dir, "one").value() == 3
    first = loader.last_build
    assert first.pch_built and first.pch is None  # built beside the first op, whose glue compiled without it
    header = loader._pch_header(loader._torch_flags(False, [], False), binding=True)  # the glue binds a module
    gch = header.with_name("torch_pch.h.gch")
    stamp = gch.stat().st_mtime_ns
    assert load_toy(pch_dir, "two").value() == 3
    second = loader.last_build
    assert second.pch == header and not second.pch_built and gch.stat().st_mtime_ns == stamp
    assert sorted(second.compiled) == ["two.cpp", "two_value.cpp"]
    assert "without the precompiled" not in capsys.readouterr().out


@needs_gcc
def test_the_pch_is_part_of_the_glues_object_hash(pch_dir, monkeypatch):
    load_toy(pch_dir, "one")
    monkeypatch.setattr(toolchain, "PCH_HEADER", SMALL_PCH + "#include <vector>\n")
    load_toy(pch_dir, "one")  # a new PCH: the glue's object is a new one, the torch-free file's is not
    assert loader.last_build.pch_built and loader.last_build.compiled == ["one.cpp"]
    load_toy(pch_dir, "two")
    assert loader.last_build.pch == loader._pch_header(loader._torch_flags(False, [], False), binding=True)


@needs_gcc
def test_a_file_without_a_binding_gets_the_pch_without_pybind11(pch_dir, capsys):
    """Each file that includes pybind11 compiles its inline functions (1.7 s a file on 2 cores): a torch file
    that binds no module (an op's NAME.autograd.cpp) gets the PCH without them, the binding file the other."""
    (pch_dir / "two_plain.cpp").write_text("#include <c10/macros/Macros.h>\nint plain() { return 2; }\n")
    load_toy(pch_dir, "one")  # precompiles both
    flags = loader._torch_flags(False, [], False)
    loader.load(
        "two", [pch_dir / "two.cpp", pch_dir / "two_plain.cpp", pch_dir / "two_value.cpp"], cuda=False, verbose=True
    )
    commands = {
        line.split(" -c ")[1].split()[0]: line for line in capsys.readouterr().out.splitlines() if line.startswith("$ ")
    }
    uses = {Path(src).name: str(h) in cmd for src, cmd in commands.items() for h in [loader._pch_header(flags, True)]}
    assert uses == {"two.cpp": True, "two_plain.cpp": False, "two_value.cpp": False}, commands
    plain = str(loader._pch_header(flags, False))
    assert plain in commands[str(pch_dir / "two_plain.cpp")] and plain not in commands[str(pch_dir / "two.cpp")]
    assert "-include" not in commands[str(pch_dir / "two_value.cpp")]  # no torch header: no PCH


@needs_gcc
def test_a_stale_pch_is_reported_and_does_not_break_the_build(pch_dir, capsys):
    load_toy(pch_dir, "one")
    gch = loader._pch_header(loader._torch_flags(False, [], False), binding=True).with_name("torch_pch.h.gch")
    gch.write_bytes(b"not a precompiled header")  # e.g. left by another compiler version
    assert load_toy(pch_dir, "two").value() == 3
    assert "compiled without the precompiled torch header" in capsys.readouterr().out


@needs_gcc
def test_a_pch_that_cannot_be_built_falls_back_to_the_plain_compile(pch_dir, monkeypatch, capsys):
    monkeypatch.setattr(toolchain, "PCH_HEADER", SMALL_PCH + "#error this header cannot be precompiled\n")
    assert load_toy(pch_dir, "one").value() == 3
    assert loader.last_build.pch is None
    assert "Could not precompile" in capsys.readouterr().out
    assert load_toy(pch_dir, "two").value() == 3  # the failure is remembered: no second attempt
    assert "Could not precompile" not in capsys.readouterr().out


@needs_gcc
def test_a_second_process_waits_for_the_pch_lock(pch_dir):
    header = loader._pch_header(loader._torch_flags(False, [], False))
    header.parent.mkdir(parents=True)
    lock = header.with_name("lock")
    lock.write_text(f"{socket.gethostname()} {os.getpid()} 0")  # held by this (live) process
    script = (
        "import sys; from pathlib import Path; from helpers import loader;"
        f"loader.toolchain.PCH_HEADER = {SMALL_PCH!r}; loader.toolchain.PCH_BINDING = {SMALL_BINDING!r}; d = Path({str(pch_dir)!r});"
        "m = loader.load('one', [d / 'one.cpp', d / 'one_value.cpp'], cuda=False);"
        "print('value', m.value(), 'pch_built', loader.last_build.pch_built)"
    )
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    time.sleep(15)  # the op's own compiles go on meanwhile (a few seconds); the load waits for the PCH
    assert proc.poll() is None, proc.communicate()[0]
    lock.unlink()
    out = proc.communicate(timeout=300)[0]
    assert proc.returncode == 0 and "value 3 pch_built True" in out
    assert "Waiting for another build" in out


@needs_gcc
def test_concurrent_builds_of_two_ops_precompile_once(pch_dir):
    """Two processes building their first op at once precompile each header once between them."""
    script = (
        "import sys; from pathlib import Path; from helpers import loader;"
        f"loader.toolchain.PCH_HEADER = {SMALL_PCH!r}; loader.toolchain.PCH_BINDING = {SMALL_BINDING!r}; d = Path({str(pch_dir)!r});"
        "op = sys.argv[1]; run, n = loader.toolchain._run, [0];"  # the PCH is built in toolchain._ensure_pch
        "loader.toolchain._run = lambda cmd, what: (n.__setitem__(0, n[0] + ('precompiling' in what)), run(cmd, what))[1];"
        "m = loader.load(op, [d / f'{op}.cpp', d / f'{op}_value.cpp'], cuda=False);"
        "print('value', m.value(), 'precompiled', n[0])"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", script, op], cwd=ROOT, stdout=subprocess.PIPE, text=True)
        for op in ("one", "two")
    ]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert all(p.returncode == 0 and "value 3" in o for p, o in zip(procs, outs)), outs
    counts = [int(o.split("precompiled")[1].split()[0]) for o in outs]
    assert sum(counts) == 2, outs  # the plain PCH and the binding one, each once


def test_with_few_cores_an_ops_torch_files_compile_as_one(tmp_path, monkeypatch):
    """An op's glue split into parts (NAME.cpp, NAME.autograd.cpp) compiles side by side with 4+ cores; with
    fewer, as one generated file that includes them (each part would parse torch's headers on its own), and
    a torch-free part (an exercise's) stays apart, so editing it recompiles it alone."""
    monkeypatch.setenv("COURSE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("COURSE_PCH", "0")
    (tmp_path / "op.cpp").write_text(GLUE.replace("int value();", "int value();\nint part();"))
    (tmp_path / "op.part.cpp").write_text("#include <c10/macros/Macros.h>\nint part() { return 4; }\n")
    (tmp_path / "op.exercise.cpp").write_text("int part();\nint value() { return part() + 1; }\n")
    sources = [tmp_path / f for f in ("op.cpp", "op.part.cpp", "op.exercise.cpp")]
    monkeypatch.setenv("COURSE_UNITY", "0")
    assert loader.load("op", sources, cuda=False).value() == 5
    assert sorted(loader.last_build.compiled) == ["op.cpp", "op.exercise.cpp", "op.part.cpp"]
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.delenv("COURSE_UNITY")
    assert loader.load("op", sources, cuda=False).value() == 5
    assert loader.last_build.compiled == ["op+op.part.cpp"]  # the exercise's object is the same as before
    (tmp_path / "op.exercise.cpp").write_text("int part();\nint value() { return part() + 2; }\n")
    assert loader.load("op", sources, cuda=False).value() == 6
    assert loader.last_build.compiled == ["op.exercise.cpp"]


def test_a_linker_that_fails_falls_back_to_the_default_one(ext_dir, monkeypatch):
    """gold could not open the libstdc++.so of a g++ installed under /opt on the GPU test machine: the loader
    links again with the default linker instead of failing every build."""
    toolchain._fast_linker.cache_clear()
    monkeypatch.setattr(toolchain, "_fast_linker", lambda: ["-fuse-ld=no-such-linker"])
    monkeypatch.setenv("COURSE_FAST_LINKER", "1")  # undone after the test, as the fallback sets it to 0
    (ext_dir / "val.h").write_text("#define BASE 30\n")
    (ext_dir / "value.cpp").write_text('#include "val.h"\nint value() { return BASE + 7; }\n')
    assert build(ext_dir).value() == 37
    assert loader.last_build.linked


# A g++ that links the C++ runtime into shared libraries statically, as one GPU image's does: every module
# would carry a private copy of libstdc++, and a process fails or crashes where two copies' locales meet.
STATIC_CXX = """#!/bin/sh
case " $* " in *" -shared "*) exec g++ "$@" -static-libstdc++;; esac
exec g++ "$@"
"""


def _needed(lib: Path) -> str:
    return subprocess.run(["readelf", "-d", str(lib)], capture_output=True, text=True, check=True).stdout


@pytest.mark.skipif(not sys.platform.startswith("linux") or "clang" in _CXX, reason="g++ on Linux")
def test_the_shared_cxx_runtime_named_first_keeps_a_static_one_out(tmp_path):
    static = tmp_path / "g++"
    static.write_text(STATIC_CXX)
    static.chmod(0o755)
    assert toolchain.links_cxx_runtime_statically(str(static))  # the machine's own g++ may be such a one too
    src = tmp_path / "s.cpp"
    src.write_text("#include <sstream>\nstd::string f(long n) { std::ostringstream s; s << n; return s.str(); }\n")
    subprocess.run([str(static), "-c", "-fPIC", str(src), "-o", str(tmp_path / "s.o")], check=True)
    for flags, shared in (([], False), (toolchain.shared_cxx_runtime(), True)):
        out = tmp_path / f"s{int(shared)}.so"
        toolchain._link([str(static), "-shared", *flags], [str(tmp_path / "s.o")], out)
        assert ("libstdc++.so" in _needed(out)) == shared, flags


def test_every_module_is_linked_with_shared_cxx_runtimes_flags(ext_dir, monkeypatch):
    """The loader's link line carries toolchain.shared_cxx_runtime() (here a marker symbol in its place)."""
    monkeypatch.setattr(toolchain, "shared_cxx_runtime", lambda: ["-Wl,--defsym=course_link_marker=0"])
    m = build(ext_dir)
    assert (
        loader.last_build.linked
        and "course_link_marker"
        in subprocess.run(["nm", m.__file__], capture_output=True, text=True, check=True).stdout
    )


@needs_gcc
def test_the_pch_is_on_by_default_only_with_four_cores(monkeypatch):
    monkeypatch.delenv("COURSE_PCH", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert not loader._pch_enabled()
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    assert loader._pch_enabled()
    monkeypatch.setenv("COURSE_PCH", "1")
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert loader._pch_enabled()


@needs_gcc
def test_a_glue_exercises_file_gets_the_pch_with_few_cores_too(monkeypatch):
    """The file a glue exercise's edit recompiles (square.library.cpp: the learner's registration) is compiled
    alone and with the precompiled torch header on any machine where it can be built; the op's other glue
    (square.cpp) only where the PCH is on for every file."""
    monkeypatch.delenv("COURSE_PCH", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    includes = loader._include_dirs([])
    deps = {s.name: loader._local_deps(s.resolve(), includes) for s in loader.sources_for("square")}
    assert loader._glue_exercise(deps["square.library.cpp"]) and not loader._glue_exercise(deps["square.cpp"])
    assert loader._pch_possible() and not loader._pch_enabled()
    monkeypatch.setenv("COURSE_PCH", "0")
    assert not loader._pch_possible()


SHOWN = """\
// toy.cpp: binds the module.
#include <torch/csrc/utils/pybind.h>  // PYBIND11_MODULE: this file binds the module
/* PYBIND11_MODULE in a block comment */

template <typename T>
struct Acc {
  using type = float;
};
template <>
struct Acc<double> {
  using type = double;
};
template <typename T>
using AccT = typename Acc<T>::type;

int unrelated() { return 0; }

PYBIND11_MODULE(toy, m) {
  m.def("f", &unrelated);
}
"""


def test_show_matches_code_not_comments(tmp_path, capsys):
    """A comment that mentions the name (after code, or in a block comment) is not the definition."""
    (tmp_path / "toy.cpp").write_text(SHOWN)
    loader.show(tmp_path / "toy.cpp", "PYBIND11_MODULE(")
    out = capsys.readouterr().out.splitlines()
    assert out[1][6:] == "PYBIND11_MODULE(toy, m) {" and out[-1][6:] == "}"


def test_show_through_prints_a_template_and_its_specializations(tmp_path, capsys):
    (tmp_path / "toy.cpp").write_text(SHOWN)
    loader.show(tmp_path / "toy.cpp", "struct Acc {", through="using AccT =")
    code = [line[6:] for line in capsys.readouterr().out.splitlines()[1:]]
    assert code[0] == "template <typename T>" and "struct Acc<double> {" in code
    assert code[-1] == "using AccT = typename Acc<T>::type;"
    with pytest.raises(ValueError, match="not found"):
        loader.show(tmp_path / "toy.cpp", "struct Acc {", through="no such text")
