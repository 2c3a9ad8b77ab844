"""Every CUDA source compiles for the architectures the course supports (Colab's T4 sm_75, A100 sm_80,
H100 sm_90), with the exercise stubs and with the solutions, and the module imports without a GPU. Each
distinct code path compiles once: every op for the lowest and the highest architecture, and a .cu file that
(itself or through a header) branches on `__CUDA_ARCH__` at one in between, alone, for that one too. The device
compile costs the same again per architecture, and an architecture with no branch of its own compiles the code
of the one below it."""

import re
import subprocess

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


def _branches(source) -> set[int]:
    """The __CUDA_ARCH__ thresholds a source tests, itself or in the local headers it includes."""
    includes = loader._include_dirs([])
    files = (source.resolve(), *loader._local_deps(source.resolve(), includes))
    return {int(t) for f in files for t in _BRANCH.findall(f.read_text())}


# (a .cu file, an architecture between the lowest and the highest that it branches at)
INNER = [
    (src, arch)
    for name in CUDA_OPS
    for src in loader.sources_for(name)
    if src.suffix == ".cu"
    for arch in ARCHS[1:-1]
    if int(float(arch) * 100) in _branches(src)
]


def test_the_inner_architectures_are_found():
    assert ("layernorm.hopper.cu", "8.0") in [(s.name, a) for s, a in INNER]  # __CUDA_ARCH__ >= 800


@pytest.mark.parametrize("source, arch", INNER, ids=[f"{s.name}-sm{a.replace('.', '')}" for s, a in INNER])
def test_a_source_compiles_for_the_architecture_it_branches_at(source, arch, tmp_path):
    import torch

    kit = env.find_toolkit(torch.version.cuda)
    if kit is None:
        pytest.skip("no nvcc here")
    sm = arch.replace(".", "")
    cmd = [str(kit.nvcc), "-std=c++17", "-O0", "--expt-relaxed-constexpr", "-Xcompiler", "-fPIC", *CHECK_ONLY]
    cmd += ["-gencode", f"arch=compute_{sm},code=sm_{sm}", "-I", str(env.KERNELS / "solutions")]
    cmd += ["-I", str(env.KERNELS), "-c", str(source), "-o", str(tmp_path / "out.o")]
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 0, f"{source.name} for sm_{sm}:\n{done.stderr[-3000:]}"


@pytest.mark.parametrize("solutions", ["0", "1"], ids=["stubs", "solutions"])
@pytest.mark.parametrize("name", CUDA_OPS)
def test_cuda_source_compiles_for_all_archs(name, solutions, monkeypatch):
    monkeypatch.setenv("COURSE_SOLUTIONS", solutions)
    # pch=True: the CUDA flavour of the precompiled torch headers, built once, takes each later op's glue from
    # ~38 s to ~27 s on 2 cores (fused_bias_relu).
    module = loader.load(name, cuda=True, archs=[ARCHS[0], ARCHS[-1]], extra_cuda_cflags=CHECK_ONLY, pch=True)
    # With the stubs, an op with a glue exercise (square: lesson 02b's binding is the learner's) may bind nothing.
    includes = loader._include_dirs([])
    glue = any(loader._glue_exercise(loader._local_deps(s.resolve(), includes)) for s in loader.sources_for(name))
    if solutions == "1" or not glue:
        bound = [f for f in dir(module) if not f.startswith("_") and callable(getattr(module, f))]
        assert bound, f"{name} imports but binds no function"


def test_toolkit_matches_torch():
    import torch

    kit = env.find_toolkit(torch.version.cuda)
    assert env.toolkit_problem(kit, torch.version.cuda) is None, env.toolkit_problem(kit, torch.version.cuda)


def test_the_capstone_solution_compiles_for_all_archs():
    """Lesson 08's answer (kernels/solutions/swiglu/, an op folder of its own) for the lowest and highest architecture."""
    import torch

    from helpers import capstone

    where = capstone.folder(solution=True)
    loader.load(
        capstone.NAME,
        sources=capstone.sources(where),
        include_dirs=[where],
        cuda=True,
        archs=[ARCHS[0], ARCHS[-1]],
        extra_cuda_cflags=CHECK_ONLY,
        pch=True,
    )
    assert str(torch.ops.course.swiglu.default._schema) == "course::swiglu(Tensor x) -> Tensor"


@pytest.mark.parametrize("name", ["batchnorm_relu", "cross_entropy", "masked_softmax", "csr_matmul"])
def test_a_practice_solution_compiles_for_all_archs(name):
    """Lesson 09's answers (kernels/solutions/<op>/, op folders) for the lowest and highest architecture, glue
    included; the learner's copies below."""
    from helpers import capstone, practice

    where = practice.folder(name, solution=True)
    loader.load(
        name,
        sources=capstone.sources(where),
        include_dirs=[where],
        cuda=True,
        archs=[ARCHS[0], ARCHS[-1]],
        extra_cuda_cflags=CHECK_ONLY,
        pch=True,
    )


@pytest.mark.parametrize("name", ["batchnorm_relu", "cross_entropy", "masked_softmax", "csr_matmul"])
def test_a_practice_stubs_cuda_files_compile(name, tmp_path):
    """The learner's .cu files (torch-free: nvcc alone, no glue) as generated, for the lowest and highest
    architecture: a stub that does not compile would greet the learner with a build error."""
    import torch

    from helpers import practice

    kit = env.find_toolkit(torch.version.cuda)
    if kit is None:
        pytest.skip("no nvcc here")
    where = practice.folder(name, solution=False)
    for source in sorted(where.glob("*.cu")):
        cmd = [str(kit.nvcc), "-std=c++17", "-O0", "--expt-relaxed-constexpr", "-Xcompiler", "-fPIC", *CHECK_ONLY]
        for arch in (ARCHS[0], ARCHS[-1]):
            sm = arch.replace(".", "")
            cmd += ["-gencode", f"arch=compute_{sm},code=sm_{sm}"]
        cmd += ["-I", str(where), "-I", str(env.KERNELS), "-c", str(source), "-o", str(tmp_path / "out.o")]
        done = subprocess.run(cmd, capture_output=True, text=True)
        assert done.returncode == 0, f"{source.name}:\n{done.stderr[-3000:]}"
