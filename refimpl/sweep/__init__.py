"""Parameter sweeps that scale out: a grid of cells on a local process pool or a Dask cluster.

A grid file (TOML) names what each cell runs (a *kind*), the fixed parameters, the parameter axes, the
replicates and the metrics to keep. :func:`run` runs every cell, each with its own seed derived from
the grid and the cell (never from the order of execution), journals results as cells finish, resumes
after a crash, and returns a table (``pyarrow.Table``) with one row per cell. The command
``refimpl sweep GRID.toml --out results.parquet`` does the same from a shell.

See ``docs/howto/sweeps.md`` for a walk-through, from a laptop to a Dask cluster.
"""

from refimpl.sweep.cells import execute_cell
from refimpl.sweep.engine import ENGINES, journal_path, run
from refimpl.sweep.grid import Cell, Grid, GridError, expand, load_grid, parse_grid
from refimpl.sweep.kinds import (
    CLOSED_FORMS,
    KINDS,
    busy,
    closed_form,
    resolve_kind,
    simulate,
)

__all__ = [
    "CLOSED_FORMS",
    "ENGINES",
    "KINDS",
    "Cell",
    "Grid",
    "GridError",
    "busy",
    "closed_form",
    "execute_cell",
    "expand",
    "journal_path",
    "load_grid",
    "parse_grid",
    "resolve_kind",
    "run",
    "simulate",
]
