"""The loader on a two-file extension: a torch binding (slow to compile, compiled once) and a plain
C++ file that the tests edit, as a learner edits a kernel."""

import os
import socket

import pytest

from helpers import loader

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
    old = os.environ.get("COURSE_CACHE")
    os.environ["COURSE_CACHE"] = str(d / "cache")
    yield d
    if old is None:
        os.environ.pop("COURSE_CACHE")
    else:
        os.environ["COURSE_CACHE"] = old


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
