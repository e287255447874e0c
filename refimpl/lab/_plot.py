"""One visual language for every lab figure: closed forms are lines, simulations are markers.

Sizes are chosen for the report's text column: a figure ``w`` inches wide is displayed at
``w × 100`` CSS pixels (:data:`refimpl.lab.report.PX_PER_INCH`), so a two-panel figure of
:data:`FULL_WIDTH` inches fills the 1020 px column and a 10.5 pt font is 14.6 CSS px on the page —
the size of the report's own text — at any drawing dpi (200 in the default run: sharp on a
high-density laptop screen and in print; 100 in ``--quick``: one image pixel per CSS pixel). Legends
use 9.5 pt (13 px). :func:`lab_style` applies these sizes; every figure is drawn inside it.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

__all__ = [
    "COLORS",
    "FULL_WIDTH",
    "LAB_RC",
    "SIM",
    "closed",
    "lab_style",
    "label_points",
    "legend_below",
    "new_figure",
    "series_handles",
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

#: Width (inches) of a figure that fills the text column; one-panel figures use about 7 inches.
FULL_WIDTH = 9.8

#: Font and line sizes of every lab figure (matplotlib rc parameters).
LAB_RC: dict[str, Any] = {
    "font.size": 10.5,
    "axes.titlesize": 11.5,
    "axes.labelsize": 10.5,
    "xtick.labelsize": 9.5,
    "ytick.labelsize": 9.5,
    "legend.fontsize": 9.5,
    "legend.framealpha": 0.92,
    "legend.borderaxespad": 0.4,
    "lines.linewidth": 2.0,
    "lines.markersize": 5.0,
}


@contextmanager
def lab_style() -> Iterator[None]:
    """Draw inside this context so that figures get the lab's font sizes (nothing leaks out)."""
    import matplotlib  # lazy: matplotlib is heavy and needed only when a figure is drawn

    rc: Any = LAB_RC  # matplotlib types its keys as a Literal of every rc name
    with matplotlib.rc_context(rc):
        yield


def clusters(points: Any, radius: float) -> list[list[int]]:
    """Indices of ``points`` grouped transitively by distance ``<= radius``; each group, and the
    list of groups, in index order.

    >>> clusters(np.array([[0.0, 0.0], [50.0, 0.0], [5.0, 5.0], [50.0, 11.0]]), 12.0)
    [[0, 2], [1, 3]]
    """
    pts = np.asarray(points, dtype=np.float64).reshape(-1, 2)
    root = list(range(len(pts)))

    def find(i: int) -> int:
        while root[i] != i:
            i = root[i]
        return i

    for i in range(len(pts)):
        for j in range(i):
            if np.hypot(*(pts[i] - pts[j])) <= radius:
                a, b = find(i), find(j)
                root[max(a, b)] = min(a, b)
    groups: dict[int, list[int]] = {}
    for i in range(len(pts)):
        groups.setdefault(find(i), []).append(i)
    return list(groups.values())


def label_points(ax: Axes, xy: Any, labels: list[str], *, fontsize: float = 9.0) -> None:
    """Number the points ``xy`` of a scatter so that no label covers a point or another label.

    Points closer than 6 points (1/12 inch) share one label (``"9, 12, 13"``). Each label tries,
    in turn, the corners around its point and a few places further out, and takes the first whose
    box meets neither another point (a marker's radius about it) nor a label already placed; when
    none is free it stays up-right of its point. The placing happens while the figure is drawn,
    after its layout (no extra layout pass), and again at every draw.
    """
    from matplotlib.artist import Artist

    data = np.asarray(xy, dtype=np.float64).reshape(-1, 2)
    texts = [
        ax.annotate(
            label,
            (float(x), float(y)),
            fontsize=fontsize,
            xytext=(3.0, 3.0),
            textcoords="offset points",
        )
        for label, (x, y) in zip(labels, data, strict=True)
    ]
    for t in texts:
        t.set_in_layout(False)  # the layout must not depend on where the labels go

    class _Placer(Artist):
        def draw(self, renderer: Any) -> None:
            _place_labels(ax, data, labels, texts, renderer)

    placer = _Placer()
    placer.set_zorder(min(t.get_zorder() for t in texts) - 0.01)  # drawn just before the labels
    ax.add_artist(placer)


def _place_labels(ax: Axes, data: Any, labels: list[str], texts: list[Any], renderer: Any) -> None:
    """Set the text, visibility and offset of each label of :func:`label_points` (display
    coordinates of the drawn axes)."""
    dpi = renderer.points_to_pixels(72.0)  # display pixels per inch
    pts = ax.transData.transform(data)
    pad = 3.0  # points between a label and its point
    marker = 3.5 * dpi / 72.0  # a marker's radius and a little more, in display pixels
    taken: list[Any] = []
    for t in texts:
        t.set_visible(False)
    for group in clusters(pts, 6.0 * dpi / 72.0):
        others = np.delete(pts, group, axis=0)
        text = texts[group[0]]
        text.set_text(", ".join(labels[i] for i in group))
        text.set_visible(True)
        text.set_position((pad, pad))
        box = text.get_window_extent(renderer)
        w, h = box.width * 72.0 / dpi, box.height * 72.0 / dpi  # in points
        for dx, dy in (
            (pad, pad), (pad, -pad - h), (-pad - w, pad), (-pad - w, -pad - h),
            (-w / 2, pad + 4), (-w / 2, -pad - h - 4), (pad + 6, -h / 2), (-pad - w - 6, -h / 2),
        ):  # fmt: skip
            text.set_position((dx, dy))
            box = text.get_window_extent(renderer)
            hits_point = bool(
                np.any(
                    (others[:, 0] >= box.x0 - marker)
                    & (others[:, 0] <= box.x1 + marker)
                    & (others[:, 1] >= box.y0 - marker)
                    & (others[:, 1] <= box.y1 + marker)
                )
            )
            if not hits_point and not any(box.overlaps(b) for b in taken):
                break
        else:
            text.set_position((pad, pad))
            box = text.get_window_extent(renderer)
        taken.append(box)


#: Style of a simulated series (markers, no line); combine with ``color=``.
SIM: dict[str, Any] = {"marker": "o", "linestyle": "none", "markersize": 4.5, "alpha": 0.85}


def _may_overflow(ax: Axes) -> bool:
    """Whether the title of ``ax`` may be wider than 80% of its axes (a generous estimate: an
    average glyph is narrower than 0.6 em in the lab's sans-serif font)."""
    text = ax.title.get_text()
    if not text:
        return False
    em_in = float(ax.title.get_fontsize()) / 72
    longest = max(len(line) for line in text.split("\n"))
    fig = ax.get_figure()
    assert fig is not None
    axes_in = ax.get_position().width * float(fig.bbox.width) / float(fig.dpi)
    return longest * 0.6 * em_in > 0.8 * axes_in


def fit_titles(fig: Figure) -> None:
    """Wrap each axes title that is wider than its axes onto more lines, at spaces.

    A title wider than its axes runs over the next panel or past the figure's edge, where the saved
    image cuts it off; wrapped, it keeps every word and the constrained layout makes room for the
    extra lines when the figure is saved.
    """
    if not any(_may_overflow(ax) for ax in fig.axes):
        return  # no title near its axes' width: no layout pass needed
    fig.draw_without_rendering()  # lays the figure out, so that the extents below are final
    for ax in fig.axes:
        title = ax.title
        text = title.get_text()
        if not text or not title.get_visible():
            continue
        room = ax.get_window_extent().width
        wide = title.get_window_extent().width
        if wide <= room:
            continue
        chars = max(12, int(len(text.replace("\n", " ")) * room / wide * 0.95))
        title.set_text("\n".join(textwrap.wrap(text.replace("\n", " "), chars)))


def new_figure(
    ncols: int = 1, *, nrows: int = 1, width: float | None = None, height: float = 4.0
) -> tuple[Figure, list[Axes]]:
    """A figure with ``nrows × ncols`` axes, row by row (no pyplot state, so nothing leaks).

    ``width`` is the whole figure's width in inches: :data:`FULL_WIDTH` by default for several
    panels, 7 inches for one.
    """
    w = width if width is not None else (FULL_WIDTH if ncols > 1 else 7.0)
    if _PYPLOT[0]:
        import matplotlib.pyplot as plt  # lazy: heavy, and only after use_pyplot() chose it

        fig = plt.figure(figsize=(w, height), layout="constrained")
    else:
        fig = Figure(figsize=(w, height), layout="constrained")
    axes = [fig.add_subplot(nrows, ncols, i + 1) for i in range(nrows * ncols)]
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


def series_handles(
    series: list[tuple[str, str]],
    *,
    closed_label: str = "closed form",
    sim_label: str = "simulation",
    extra: list[Any] | None = None,
) -> list[Any]:
    """Legend handles: one per coloured series, plus two explaining line vs markers."""
    from matplotlib.lines import Line2D  # lazy: matplotlib is heavy

    handles: list[Any] = [
        Line2D([], [], color=c, linewidth=2, marker="o", markersize=4.5, label=label)
        for label, c in series
    ]
    handles += list(extra or [])
    handles += [
        Line2D([], [], color="0.25", linewidth=2, label=f"line: {closed_label}"),
        Line2D([], [], color="0.25", marker="o", linestyle="none", label=f"markers: {sim_label}"),
    ]
    return handles


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
    handles = series_handles(series, closed_label=closed_label, sim_label=sim_label, extra=extra)
    ax.legend(handles=handles, **kw)


def legend_below(fig: Figure, handles: list[Any], *, ncol: int) -> None:
    """One legend for the whole figure, under its panels, where it covers no data."""
    fig.legend(handles=handles, loc="outside lower center", ncol=ncol, frameon=False)
