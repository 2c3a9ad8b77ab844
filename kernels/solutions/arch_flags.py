"""Exercise 1 of lesson 06: TORCH_CUDA_ARCH_LIST as nvcc's -gencode flags, the way torch's BuildExtension
turns it into them.

The list names GPU architectures as compute capabilities, "7.5;8.0;9.0+PTX" (separated by ";" or spaces).
Each one, "X.Y", becomes machine code (SASS) for that GPU:

    -gencode=arch=compute_XY,code=sm_XY

and "X.Y+PTX" adds, besides that machine code, the PTX: the portable assembly that the driver compiles when
the module is loaded on a GPU newer than any listed (without it, such a GPU finds no kernel to run):

    -gencode=arch=compute_XY,code=compute_XY

Write gencode_flags(arch_list) -> the list of flags (in any order). About 8 lines.

Check your work with the self-check cell in lesson 06.
"""


def gencode_flags(arch_list: str) -> list[str]:
    # BEGIN SOLUTION
    flags = []
    for arch in arch_list.replace(";", " ").split():
        number = arch.removesuffix("+PTX").replace(".", "")
        flags.append(f"-gencode=arch=compute_{number},code=sm_{number}")
        if arch.endswith("+PTX"):
            flags.append(f"-gencode=arch=compute_{number},code=compute_{number}")
    return flags
    # END SOLUTION
