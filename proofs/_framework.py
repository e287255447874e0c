"""The claim registry and the assertion helpers used by every proof module.

Methods (how a claim is established; shown on its derivation page):

- ``symbolic``: an expression that SymPy simplifies to exactly zero (or a sign SymPy proves).
- ``exact``: a finite computation in exact arithmetic (``Fraction`` or SymPy rationals), e.g. a finite
  sum over a discrete support with symbolic probabilities.
- ``numeric``: *numeric only*: SymPy could not simplify, so the identity is evaluated with
  high-precision arithmetic (mpmath, 50 digits) at seeded random points of the domain.

Every claim that derives a closed form also evaluates the matching ``refimpl`` function against it.

Scope (also shown on the derivation page): what the check covers. A claim proved for every value of
its domain has scope :data:`GENERAL`; a claim checked on finitely many instances (a horizon
``T = 4``, every ``n <= 6``, one worked example) says which, so that nobody reads "VT1 holds" as
"VT1 is proved for every horizon".
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import random
import textwrap
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

import sympy as sp

Method = Literal["symbolic", "exact", "numeric"]

#: The scope of a claim proved for every value of its stated domain.
GENERAL = "general: every value of the stated domain"


@dataclass(frozen=True)
class Claim:
    """One claim: a stable id, a statement (MyST markdown), how it is established, and its check.

    ``scope`` says what the check covers: :data:`GENERAL`, or the instances it was proved for
    (e.g. ``"horizon T = 4"``).
    """

    id: str
    statement: str
    method: Method
    check: Callable[[], None]
    module: str
    scope: str

    def __call__(self) -> None:
        self.check()


REGISTRY: dict[str, Claim] = {}


def claim(
    id: str, statement: str, *, method: Method = "symbolic", scope: str
) -> Callable[[Callable[[], None]], Callable[[], None]]:
    """Register the decorated zero-argument function as the check of claim ``id``.

    ``scope`` is required: :data:`GENERAL`, or the finite instances the check covers.
    """
    if method not in ("symbolic", "exact", "numeric"):
        raise ValueError(f"method must be symbolic, exact or numeric; got {method!r}")
    if not scope.strip():
        raise ValueError(f"claim {id} must state its scope (GENERAL or the instances it covers)")

    def register(fn: Callable[[], None]) -> Callable[[], None]:
        if id in REGISTRY and REGISTRY[id].check is not fn:
            raise ValueError(f"claim id {id} is registered twice ({REGISTRY[id].module})")
        REGISTRY[id] = Claim(id, statement, method, fn, fn.__module__, scope)
        return fn

    return register


def all_claims() -> dict[str, Claim]:
    """Import every proof module and return the registry, ordered by module then id."""
    import proofs

    for info in pkgutil.iter_modules(proofs.__path__):
        if not info.name.startswith("_"):
            importlib.import_module(f"proofs.{info.name}")
    return dict(sorted(REGISTRY.items(), key=lambda kv: (kv[1].module, kv[0])))


def assert_zero(expr: sp.Expr, *, label: str = "") -> None:
    """Assert that ``expr`` simplifies to exactly zero."""
    simplified = sp.simplify(expr)
    if simplified != 0:
        raise AssertionError(f"{label or 'expression'} does not simplify to 0: {simplified}")


def assert_positive(expr: sp.Expr, *, label: str = "") -> None:
    """Assert that SymPy proves ``expr > 0`` from the symbols' assumptions."""
    if sp.simplify(expr).is_positive is not True:
        raise AssertionError(f"{label or 'expression'} is not provably positive: {expr}")


def assert_nonnegative(expr: sp.Expr, *, label: str = "") -> None:
    """Assert that SymPy proves ``expr >= 0`` from the symbols' assumptions."""
    if sp.simplify(expr).is_nonnegative is not True:
        raise AssertionError(f"{label or 'expression'} is not provably >= 0: {expr}")


def assert_numeric_zero(
    expr: sp.Expr,
    domains: Mapping[sp.Symbol, tuple[float, float]],
    *,
    points: int = 25,
    digits: int = 50,
    tol: float = 1e-30,
    seed: int = 0,
    label: str = "",
) -> None:
    """Numeric only: ``|expr| <= tol`` at ``points`` seeded random points, ``digits`` precision.

    Each symbol is drawn uniformly from its ``(low, high)`` domain.
    """
    rng = random.Random(seed)
    for _ in range(points):
        subs = {s: sp.Float(rng.uniform(lo, hi), digits) for s, (lo, hi) in domains.items()}
        value = sp.N(expr.subs(subs), digits)
        if not abs(value) <= tol:
            raise AssertionError(f"{label or 'expression'} = {value} != 0 at {subs}")


def assert_close(
    found: float, expected: float, *, rel: float = 1e-12, abs_: float = 0.0, label: str = ""
) -> None:
    """Compare a refimpl float result with a closed form evaluated by SymPy."""
    if not abs(found - expected) <= max(abs_, rel * abs(expected)):
        raise AssertionError(
            f"{label or 'value'}: refimpl gives {found!r}, closed form {expected!r}"
        )


METHODS = {
    "symbolic": "proved symbolically (SymPy simplifies the difference to 0)",
    "exact": "proved exactly (a finite computation in exact arithmetic)",
    "numeric": "**numeric only** (50-digit evaluation at random points; not a proof)",
}


def derivation_page(name: str, claims: Iterable[Claim]) -> str:
    """The derivation page (MyST) of proof module ``name``: its docstring, then each claim with its
    status, its scope and the source of its check."""
    module = importlib.import_module(name)
    doc = inspect.cleandoc(module.__doc__ or name)
    parts = [doc, "", "## Claims", ""]
    for c in claims_of(name, claims):
        source = textwrap.dedent(inspect.getsource(c.check))
        parts += [
            f"### {c.id}",
            "",
            f"({c.id.lower()})=",
            "",
            c.statement,
            "",
            f"*Status:* {METHODS[c.method]}. *Scope:* {c.scope}. "
            f"*Checked by* `{name}.{c.check.__name__}`:",
            "",
            "```python",
            source.rstrip(),
            "```",
            "",
        ]
    return "\n".join(parts) + "\n"


def claims_of(module: str, claims: Iterable[Claim]) -> list[Claim]:
    """The claims registered by one proof module."""
    return [c for c in claims if c.module == module]
