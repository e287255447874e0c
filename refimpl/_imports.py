"""Importing an object named by a ``"module:qualname"`` string: one way, one set of messages.

The sweep's cell kinds (``kind = "mypkg.cells:run"``), the conformance suite's candidates
(``check_conformance("mypkg.weights:tis", ...)``, ``pytest --refimpl-target``) and the lab's
sections all name code by a string. They resolve it here, so that a typo reads the same wherever it
is made. A leaf module: it imports only the standard library and :mod:`refimpl.errors`, so any
module can import it at its top.
"""

from __future__ import annotations

import importlib
from typing import Any

from refimpl.errors import InvalidArgument, InvalidArgumentType

__all__: list[str] = []


def split_reference(ref: str, *, what: str) -> tuple[str, str]:
    """``(module, qualname)`` of ``"module:qualname"``; both parts must be given.

    ``what`` names the reference in the message (``"candidate"``, ``"cell kind"``).

    Examples
    --------
    >>> split_reference("os.path:join", what="candidate")
    ('os.path', 'join')
    >>> split_reference("os.path.join", what="candidate")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    refimpl.errors.InvalidArgument: candidate must read "module:function" with both parts given; ...
    """
    module_name, sep, qualname = ref.partition(":")
    if not sep or not module_name or not qualname:
        raise InvalidArgument(
            f'{what} must read "module:function" with both parts given; got {what}={ref!r}. '
            "Separate the module and the function with ':'."
        )
    return module_name, qualname


def import_object(ref: str, *, what: str, require_callable: bool = True) -> Any:
    """The object ``"module:qualname"`` names (``qualname`` may be dotted: ``"mod:Class.method"``).

    Raises :class:`~refimpl.errors.InvalidArgument` when the string is malformed, the module cannot
    be imported (or fails while it is imported) or has no such attribute, and
    :class:`~refimpl.errors.InvalidArgumentType` when ``require_callable`` and the object is not
    callable. Every message names ``what``, the string and the fix.

    Examples
    --------
    >>> import_object("os.path:join", what="candidate").__name__
    'join'
    >>> import_object("os.path:nope", what="candidate")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    refimpl.errors.InvalidArgument: candidate must name an attribute of its module; ...
    """
    module_name, qualname = split_reference(ref, what=what)
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise InvalidArgument(
            f"{what} module {module_name!r} cannot be imported ({exc}); got {what}={ref!r}. "
            "Check the spelling, and install it or put it on sys.path (PYTHONPATH) where it runs."
        ) from None
    except Exception as exc:  # the module itself fails while it is imported
        raise InvalidArgument(
            f"{what} module {module_name!r} failed while it was imported "
            f"({type(exc).__name__}: {exc}); got {what}={ref!r}. Fix the module, or name another."
        ) from None
    for part in qualname.split("."):
        if not hasattr(obj, part):
            raise InvalidArgument(
                f"{what} must name an attribute of its module; got {what}={ref!r}, and module "
                f"{module_name!r} has no attribute {qualname!r}. Check the function name after ':'."
            )
        obj = getattr(obj, part)
    if require_callable and not callable(obj):
        raise InvalidArgumentType(
            f"{what} must be callable; got {what}={ref!r}, which names a {type(obj).__name__}. "
            "Point at a function."
        )
    return obj


def find_object(dotted: str) -> Any | None:
    """The object a dotted ``"module.name"`` names, or ``None`` when this installation lacks it.

    Used where a missing name is an answer, not an error (the lab skips a section whose library
    names are missing).

    Examples
    --------
    >>> find_object("os.path.join").__name__, find_object("os.path.nope"), find_object("nope.x")
    ('join', None, None)
    """
    module_name, _, attr = dotted.rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        return None
    return getattr(module, attr, None)
