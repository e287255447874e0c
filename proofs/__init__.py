"""SymPy derivations behind refimpl, one module per claim family.

Every claim has a stable id (``LB3``, ``EF1``, ...), a statement, and a check that raises
``AssertionError`` when the claim fails. ``tests/test_proofs.py`` runs every registered claim; the docs
build turns each module into a derivation page (module docstring + claims).

Write a proof module like this::

    \"\"\"Length bias of first-k-of-n dispatch.  (Markdown/MyST: the derivation in words.)\"\"\"
    import sympy as sp
    from proofs._framework import GENERAL, claim, assert_zero

    @claim("LB1", r"$\\sum_\\ell q(\\ell) = 1$", method="symbolic", scope=GENERAL)
    def selected_pmf_sums_to_one() -> None:
        ...
        assert_zero(expr)
"""
