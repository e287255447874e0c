"""One visual language for every lab figure: closed forms are lines, simulations are markers."""

from __future__ import annotations

from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

__all__ = [
    "COLORS",
    "SIM",
    "closed",
    "new_figure",
    "series_legend",
    "sim",
    "sim_with_error",
    "use_pyplot",
]

_PYPLOT = [False]


def use_pyplot(flag: bool) -> None:
    """Make figures through pyplot (so Sphinx's plot directive captures them) or not (the default)."""
    _PYPLOT[0] = flag


COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf")

#: Style of a simulated series (markers, no line); combine with ``color=``.
SIM: dict[str, Any] = {"marker": "o", "linestyle": "none", "markersize": 4.5, "alpha": 0.85}


def new_figure(
    ncols: int = 1, *, width: float = 5.2, height: float = 3.8
) -> tuple[Figure, list[Axes]]:
    """A figure with ``ncols`` side-by-side axes (no pyplot state, so nothing leaks between runs)."""
    if _PYPLOT[0]:
        import matplotlib.pyplot as plt

        fig = plt.figure(figsize=(width * ncols, height), layout="constrained")
    else:
        fig = Figure(figsize=(width * ncols, height), layout="constrained")
    axes = [fig.add_subplot(1, ncols, i + 1) for i in range(ncols)]
    for ax in axes:
        ax.grid(True, alpha=0.3)
    return fig, axes


def closed(
    ax: Axes, x: Any, y: Any, *, color: str = "black", label: str | None = None, **kw: Any
) -> None:
    """Draw a closed form: a solid line."""
    ax.plot(x, y, color=color, linewidth=2.0, label=label, **kw)


def sim(
    ax: Axes, x: Any, y: Any, *, color: str = COLORS[0], label: str | None = None, **kw: Any
) -> None:
    """Draw a simulation: markers only."""
    ax.plot(x, y, color=color, label=label, **{**SIM, **kw})


def sim_with_error(
    ax: Axes,
    x: Any,
    y: Any,
    se: Any,
    *,
    color: str = COLORS[0],
    label: str | None = None,
    fmt: str = "o",
    ms: float = 4,
) -> None:
    """Draw a simulation with ±2 standard-error bars (markers only, no line)."""
    ax.errorbar(x, y, yerr=2 * np.asarray(se), fmt=fmt, color=color, ms=ms, capsize=2, label=label)


def series_legend(
    ax: Axes,
    series: list[tuple[str, str]],
    *,
    closed_label: str = "closed form",
    sim_label: str = "simulation",
    extra: list[Any] | None = None,
    **kw: Any,
) -> None:
    """One legend entry per coloured series, plus two entries explaining line vs markers."""
    from matplotlib.lines import Line2D

    handles: list[Any] = [
        Line2D([], [], color=c, linewidth=2, marker="o", markersize=4.5, label=label)
        for label, c in series
    ]
    handles += list(extra or [])
    handles += [
        Line2D([], [], color="0.25", linewidth=2, label=f"line: {closed_label}"),
        Line2D([], [], color="0.25", marker="o", linestyle="none", label=f"markers: {sim_label}"),
    ]
    ax.legend(handles=handles, **{"fontsize": 8, **kw})
