"""Every CUDA source compiles for the architectures the course supports (Colab's T4 sm_75, A100 sm_80,
H100 sm_90), with the exercise stubs and with the solutions, and the module imports without a GPU. An op
compiles for each distinct code path its sources have: the lowest and the highest architecture always, and
one in between only where a source (or a header it includes) branches on `__CUDA_ARCH__` there; the device
compile costs the same again per architecture, and an architecture with no branch of its own compiles the
code of the one below it."""

import re

import pytest

from helpers import env, loader

ARCHS = ["7.5", "8.0", "9.0"]
# A compile check, not a build anyone runs: the device code unoptimized (front end, PTX and ptxas all run, and
# catch what a learner's edit breaks) builds in about 60 % of the time, and the .cu files' host code at -O0 in
# about 65 % again (rmsnorm.cu for two architectures on 2 cores: 37 s -> 24 s); this is the largest share of
# CI's run.
CHECK_ONLY = ["-Xcicc", "-O0", "-Xptxas", "-O0", "-Xcompiler", "-O0"]
CUDA_OPS = [name for name in loader.op_names() if any((env.KERNELS / name).glob("*.cu"))]
_BRANCH = re.compile(r"__CUDA_ARCH__\s*>=?\s*(\d+)")


def archs_for(name: str) -> list[str]:
    """ARCHS[0] and ARCHS[-1], and each one between that a source of the op or a header it includes branches
    at (`__CUDA_ARCH__ >= 800` adds 8.0)."""
    includes = loader._include_dirs([])
    files = {f for s in loader.sources_for(name) for f in (s.resolve(), *loader._local_deps(s.resolve(), includes))}
    cuts = {int(t) for f in files for t in _BRANCH.findall(f.read_text())}
    inner = [a for a in ARCHS[1:-1] if int(float(a) * 100) in cuts]
    return [ARCHS[0], *inner, ARCHS[-1]]


def test_archs_for_follows_the_branches():
    assert archs_for("layernorm") == ["7.5", "8.0", "9.0"]  # layernorm.hopper.cu: __CUDA_ARCH__ >= 800
    assert archs_for("polynomial") == ["7.5", "9.0"]


@pytest.mark.parametrize("solutions", ["0", "1"], ids=["stubs", "solutions"])
@pytest.mark.parametrize("name", CUDA_OPS)
def test_cuda_source_compiles_for_all_archs(name, solutions, monkeypatch):
    monkeypatch.setenv("COURSE_SOLUTIONS", solutions)
    module = loader.load(name, cuda=True, archs=archs_for(name), extra_cuda_cflags=CHECK_ONLY)
    # With the stubs, an op with a glue exercise (square: lesson 02b's binding is the learner's) may bind nothing.
    includes = loader._include_dirs([])
    glue = any(loader._glue_exercise(loader._local_deps(s.resolve(), includes)) for s in loader.sources_for(name))
    if solutions == "1" or not glue:
        assert callable(getattr(module, "forward", None)), f"{name} has no forward()"


def test_toolkit_matches_torch():
    import torch

    kit = env.find_toolkit(torch.version.cuda)
    assert env.toolkit_problem(kit, torch.version.cuda) is None, env.toolkit_problem(kit, torch.version.cuda)
