"""Self-checks for exercises: run your op against its reference on fixed and random cases.

    selfcheck.run("backward kernel", lambda x, g: ext.backward(g, x, c, False, 1)[0],
                  lambda x, g: reference(x, g), make_inputs, device=env.device)

Cases cover awkward sizes (1, 3, 1151, sizes that are not multiples of the block or of a 16-byte
pack) and random shapes from a fixed seed, in every dtype asked for. Outputs are poisoned with NaN
(check.poisoned) so an unwritten element fails. Prints a one-line verdict; raises AssertionError
with the first failing case and the reason when the answer is wrong.
"""

from __future__ import annotations

import torch

from . import check, env

DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)  # every dtype the course's kernels take
SIZES = [1, 3, 8, 31, 256, 257, 1151, 4097, 65536 + 3]


def shapes(seed: int = 0, random_cases: int = 4) -> list[tuple[int, ...]]:
    g = torch.Generator().manual_seed(seed)
    out = [(n,) for n in SIZES] + [(7, 129), (2, 3, 5)]
    for _ in range(random_cases):
        dims = int(torch.randint(1, 4, (1,), generator=g))
        out.append(tuple(int(v) for v in torch.randint(1, 200, (dims,), generator=g)))
    return out


def run(
    name: str,
    fn,
    reference,
    make_inputs,
    *,
    device=None,
    dtypes=DTYPES,
    shapes_=None,
    hint: str = "",
    tolerances: dict | None = None,
) -> int:
    """fn(*inputs) and reference(*inputs) must return a tensor (or a tuple of tensors).
    make_inputs(shape, dtype, device, generator) returns the inputs. device defaults to env.default_device().
    Returns the number of cases run."""
    device = env.default_device(device)
    cases = 0
    for dtype in dtypes:
        for shape in shapes_ or shapes():
            g = torch.Generator().manual_seed(cases)
            inputs = make_inputs(shape, dtype, device, g)
            with check.poisoned():
                got = fn(*inputs)
            want = reference(*inputs)
            got = got if isinstance(got, (tuple, list)) else (got,)
            want = want if isinstance(want, (tuple, list)) else (want,)
            for i, (a, b) in enumerate(zip(got, want)):
                try:
                    check.assert_close(
                        a, b, name=f"output {i}" if len(want) > 1 else "output", **(tolerances or {}).get(dtype, {})
                    )
                except AssertionError as e:
                    shape_s = "x".join(map(str, shape))
                    msg = f"{name}: not yet. Case {shape_s} {str(dtype).replace('torch.', '')} on {device}:\n{e}"
                    if hint:
                        msg += f"\nHint: {hint}"
                    print("❌ " + msg.splitlines()[0])
                    raise AssertionError(msg) from None
            cases += 1
    print(
        f"✅ {name}: all {cases} cases match the reference on {device} "
        f"({', '.join(str(d).replace('torch.', '') for d in dtypes)})."
    )
    return cases
