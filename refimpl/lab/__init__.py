"""The lab: ``refimpl lab`` runs every section and writes a report a person can look at.

The lab computes nothing of its own: every closed form comes from a public ``refimpl`` function and
every simulation from :mod:`refimpl.sim`; the lab only chooses the settings, pairs each closed form with
its simulation on one figure or table, and writes ``index.html``, ``report.md``, ``figures/*.png`` and
``metrics.json``.

- :mod:`refimpl.lab.cli`: the command (``configure``/``run``).
- :mod:`refimpl.lab.report`: the report model (sections, figures, tables, checks) and its writers.
- :mod:`refimpl.lab.registry`: the sections in report order and the library names each one needs.
- one module per section: ``length_bias``, ``staleness_masking``, ``effort``, ``debugging``,
  ``async_worth``; each exposes ``build(section, config, progress)``.
- :mod:`refimpl.lab.gallery`: ``show(key)`` draws a section's figures for the docs' plot directive.
- ``_common`` (input laws, trace columns, standard errors) and ``_plot`` (one figure style: closed
  forms are lines, simulations are markers).

A section whose library functions are missing from the installed refimpl says so in the report
("not available in this build") instead of showing numbers; a library function that refuses to return
an inaccurate value is reported where its number would have been.
"""

from __future__ import annotations

__all__: list[str] = []
