"""The exceptions refimpl raises on purpose: one family, so that a caller can catch "refimpl refused".

Every refusal of an argument, a configuration, a grid file or a trace is an instance of
:class:`RefimplError`. The two classes that carry most of them are also the built-in exceptions a
caller would expect, as Hypothesis's ``InvalidArgument`` is:

- :class:`InvalidArgument` (also a :class:`ValueError`): a value outside the domain (``tau=0``, a
  pmf that does not sum to 1, two shapes that differ, ``low > high``);
- :class:`InvalidArgumentType` (also a :class:`TypeError`): an argument of the wrong kind (a string
  where an array is needed, a float where an integer is).

So ``except ValueError`` keeps working, and ``except refimpl.RefimplError`` catches every refusal
and nothing else (a bug inside refimpl surfaces as the built-in exception it is). The subclasses
that say *where* the refusal comes from are part of the family too:
:class:`refimpl.sweep.GridError` (a grid file), ``refimpl.testing._traces.TraceError`` (a logged
trace, exit code 2 of ``refimpl check``), the sweep's parameter errors, and
:class:`refimpl.testing.ConformanceError` (an implementation failed its conformance checks).

This module imports nothing, so that ``import refimpl`` stays cheap and every module can import
it at its top.

Examples
--------
>>> import refimpl
>>> try:
...     refimpl.effort_penalty([1.0], k0=1.0, b_min=0.0, tau=0.0)
... except refimpl.RefimplError as exc:
...     print(type(exc).__name__, isinstance(exc, ValueError))
InvalidArgument True
"""

from __future__ import annotations

__all__ = ["InvalidArgument", "InvalidArgumentType", "RefimplError"]


class RefimplError(Exception):
    """Root of every exception refimpl raises on purpose (a refusal, or a failed conformance check).

    Catch it to handle "refimpl refused this" without also catching a bug. Its subclasses keep
    the built-in base a caller would expect (``ValueError``, ``TypeError``, ``AssertionError``).
    """


class InvalidArgument(RefimplError, ValueError):
    """An argument whose value breaks a rule; the message names the rule, the value and the fix.

    Also a :class:`ValueError`.

    Examples
    --------
    >>> import refimpl
    >>> refimpl.staleness_mask([0, 3], eta=-1)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    refimpl.errors.InvalidArgument: eta must be >= 0 ...
    """


class InvalidArgumentType(RefimplError, TypeError):
    """An argument of the wrong kind (text for an array, a float for an integer, ...).

    Also a :class:`TypeError`.
    """
