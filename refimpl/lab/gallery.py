"""The lab's figures inside the documentation: ``show(key)`` draws one section's figures via pyplot.

Used by ``docs/howto/lab-walkthrough.md`` in ``.. plot::`` blocks, so the figures in the docs are made
by the same code, on the same library, as the figures of ``refimpl lab --quick``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from refimpl._validation import invalid
from refimpl.lab._plot import lab_style, use_pyplot
from refimpl.lab.config import lab_config
from refimpl.lab.registry import SECTIONS, missing_names
from refimpl.lab.report import Section

__all__ = ["show"]


def _placeholder(title: str, missing: list[str]) -> None:
    """A figure that says plainly that the section is not available in this build."""
    import matplotlib.pyplot as plt  # lazy: matplotlib is heavy

    fig = plt.figure(figsize=(7.0, 1.6))
    fig.text(
        0.5,
        0.5,
        f"{title}: not available in this build\n(missing: {', '.join(missing)})",
        ha="center",
        va="center",
        wrap=True,
    )


def show(key: str, *, seed: int = 0) -> Section:
    """Run section ``key`` at ``--quick`` sizes with pyplot figures left open; return the section.

    Raises
    ------
    ValueError
        If ``key`` names no section.
    """
    specs = {s.key: (n, s) for n, s in enumerate(SECTIONS, start=1)}
    if key not in specs:
        raise invalid("key", f"name a lab section ({', '.join(specs)})", key, "Pass one of them.")
    number, spec = specs[key]
    with tempfile.TemporaryDirectory() as tmp:
        section = Section(
            key=key, number=number, title=spec.title, docs=spec.docs, figures_dir=Path(tmp)
        )
        missing = missing_names(spec.requires)
        if missing:
            section.unavailable(missing)
            _placeholder(spec.title, missing)
            return section
        use_pyplot(True)
        try:
            with lab_style():
                spec.build_function()(section, lab_config(quick=True, seed=seed), lambda _m: None)
        finally:
            use_pyplot(False)
    return section
