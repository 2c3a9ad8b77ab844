"""kernels/README.md, the kernel index, is generated from the kernel files' headers (helpers/kernel_index.py):
it must be current, and every kernel and launcher a header names must exist."""

from helpers import env, kernel_index


def test_kernel_index_is_current():
    assert kernel_index.OUT.read_text() == kernel_index.table(), "run `python -m helpers.kernel_index`"


def test_every_name_a_header_index_gives_exists():
    assert kernel_index.problems() == []


# Folders whose kernels are not versions of an op: lesson 00's first kernel, and lesson 07's kernels that are
# wrong on purpose (its header lists them by bug number, each beside its fix).
NOT_VERSIONED = {"hello", "debugging"}


def test_every_op_with_kernels_is_in_the_index():
    indexed = {e.file.split("/")[0] for e in kernel_index.entries()}
    with_kernels = {p.parent.name for p in env.KERNELS.glob("*/*.cu") if "__global__" in p.read_text()}
    assert with_kernels - NOT_VERSIONED <= indexed, sorted(with_kernels - NOT_VERSIONED - indexed)


def test_a_header_naming_a_kernel_that_does_not_exist_is_found(tmp_path):
    (tmp_path / "toy").mkdir()
    (tmp_path / "toy" / "toy.cu").write_text(
        "// toy.cu: y = x (a test's op).\n"
        "//\n"
        "//   v1   toy_v1_kernel / toy_v1: one thread per element.\n"
        "//   v2   ghost_kernel / toy_v2: a kernel nobody wrote.\n"
        "__global__ void toy_v1_kernel(const float* x, float* y) {}\n"
        "void toy_v1(const float* x, float* y) { toy_v1_kernel<<<1, 1>>>(x, y); }\n"
        "void toy_v2(const float* x, float* y) {}\n"
    )
    assert [e.label for e in kernel_index.entries(tmp_path)] == ["v1", "v2"]
    found = kernel_index.problems(tmp_path)
    assert len(found) == 1 and "ghost_kernel" in found[0], found
