"""ipywidgets controls for trying a kernel at other sizes, dtypes or versions, using only the API that
ipywidgets 7.7 (Colab) and 8 share. Without ipywidgets it runs the function once with the defaults.

    widgets.interact(run, size=[1 << 20, 1 << 24], dtype=["float32", "bfloat16"], version=[2, 1])
"""

from __future__ import annotations


def interact(fn, **choices):
    """Dropdowns for each keyword (the first option is the default); fn runs now and on every change."""
    try:
        import ipywidgets as w
    except ImportError:
        print("(ipywidgets is not installed: running once with the first option of each control)")
        return fn(**{k: v[0] for k, v in choices.items()})
    controls = {k: w.Dropdown(options=list(v), value=v[0], description=k) for k, v in choices.items()}
    return w.interact(fn, **controls)
