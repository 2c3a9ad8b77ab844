"""ipywidgets controls for trying a kernel at other sizes, dtypes or versions, using only the API that
ipywidgets 7.7 (Colab) and 8 share. Without ipywidgets, or with COURSE_NO_WIDGETS=1, it runs the function once
with the defaults.

    widgets.interact(run, size=[1 << 20, 1 << 24], dtype=["float32", "bfloat16"], version=[2, 1])
"""

from __future__ import annotations

import os


def interact(fn, **choices):
    """Dropdowns for each keyword (the first option is the default); fn runs now and on every change.
    COURSE_NO_WIDGETS=1 runs it once instead, its output in the cell: the notebook tests set it, as nobody
    clicks there and nbclient can wait for a widget cell's reply until its timeout (jupyter/nbclient#312:
    in CI, 20 minutes on lesson 03's interact cell)."""
    defaults = {k: v[0] for k, v in choices.items()}
    if os.environ.get("COURSE_NO_WIDGETS") == "1":
        print("(COURSE_NO_WIDGETS=1: running once with the first option of each control)")
        return fn(**defaults)
    try:
        import ipywidgets as w
    except ImportError:
        print("(ipywidgets is not installed: running once with the first option of each control)")
        return fn(**defaults)
    controls = {k: w.Dropdown(options=list(v), value=v[0], description=k) for k, v in choices.items()}
    return w.interact(fn, **controls)
