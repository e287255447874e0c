"""Arrays in the candidate's library: the namespace, the dtype, and the way back to numpy.

The conformance suite draws its inputs as numpy arrays, hands them to the candidate in the array
library and the floating-point dtype it named (``xp=``, ``dtype=``), and reads the candidate's
outputs back as float64 numpy arrays, whatever their library or device. Everything goes through the
array-API standard (``array_api_compat.array_namespace``), not through per-library code; the only
library-specific step is finding the dtype object by its name (``bfloat16`` is not in the standard,
but torch and jax spell it so).

The reference is then evaluated on the inputs *as the candidate saw them*: each converted input is
read back to float64, so it carries exactly the rounding to the candidate's dtype.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Mapping
from types import ModuleType
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from refimpl._validation import invalid, wrong_type

__all__ = ["DTYPES", "ArrayBridge", "DtypeName", "NoAutodiff"]

DtypeName = Literal["float64", "float32", "bfloat16", "float16"]
DTYPES: tuple[DtypeName, ...] = ("float64", "float32", "bfloat16", "float16")

_ALIASES = {"numpy": "numpy", "np": "numpy", "torch": "torch", "jax": "jax.numpy"}


def _namespace(xp: Any) -> tuple[ModuleType, ModuleType, str]:
    """(array-API namespace, the library's own module, its name) for ``xp``."""
    if xp is None:
        xp = "numpy"
    if isinstance(xp, ModuleType):
        module = xp
        name = xp.__name__
    elif isinstance(xp, str):
        name = _ALIASES.get(xp, xp)
        try:
            module = importlib.import_module(name)
        except ImportError as exc:
            raise invalid(
                "xp",
                "name an installed array library",
                xp,
                f"{name!r} cannot be imported ({exc}); install it, or pass xp='numpy'.",
            ) from None
    else:
        raise wrong_type(
            "xp",
            "a module or the name of an array library ('numpy', 'torch', 'jax.numpy')",
            xp,
            "Pass e.g. xp='torch'.",
        )
    import array_api_compat

    try:
        probe = module.asarray([0.0])
        namespace = array_api_compat.array_namespace(probe)
    except Exception as exc:
        raise invalid(
            "xp",
            "be an array library that array-api-compat supports (numpy, torch, jax.numpy, cupy, "
            "dask.array, or any array-API namespace)",
            xp,
            f"array_namespace failed on {name}.asarray([0.0]) ({type(exc).__name__}: {exc}).",
        ) from None
    own = importlib.import_module(name.split(".")[0]) if name.startswith("jax") else module
    return namespace, own, name


class NoAutodiff(RuntimeError):
    """The candidate's array library has no automatic differentiation that the bridge can drive
    (numpy): a gradient must come from the candidate itself."""


class ArrayBridge:
    """Conversion between numpy (the suite's side) and the candidate's library and dtype.

    Parameters
    ----------
    xp : str, module or None
        ``"numpy"`` (default), ``"torch"``, ``"jax.numpy"``, or an array-API module.
    dtype : {"float64", "float32", "bfloat16", "float16"} or None
        The floating-point dtype of the inputs the candidate receives (default float64).

    Examples
    --------
    >>> import numpy as np
    >>> from refimpl.testing._arrays import ArrayBridge
    >>> bridge = ArrayBridge("numpy", "float32")
    >>> x = bridge.to_candidate(np.array([0.1]))
    >>> x.dtype
    dtype('float32')
    >>> float(bridge.to_numpy(x)[0]) == float(np.float32(0.1))
    True
    """

    def __init__(self, xp: Any = None, dtype: Any = None) -> None:
        dtype = "float64" if dtype is None else dtype
        if not isinstance(dtype, str) or dtype not in DTYPES:
            raise invalid(
                "dtype",
                f"be one of {', '.join(map(repr, DTYPES))}",
                dtype,
                "Pass the floating-point dtype your implementation computes in, e.g. "
                "dtype='float32'.",
            )
        self.namespace, self._module, self.name = _namespace(xp)
        self.dtype_name: DtypeName = dtype
        found = getattr(self.namespace, dtype, None)
        if found is None:
            found = getattr(self._module, dtype, None)
        if found is None:
            raise invalid(
                "dtype",
                f"be a dtype that {self.name} has",
                dtype,
                f"{self.name} has no {dtype} (numpy has no bfloat16): pass xp='torch' or "
                "xp='jax.numpy' for bfloat16, or another dtype.",
            )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # jax warns that it truncates: said below, as an error
            probe = self.namespace.asarray([0.0], dtype=found)
        if probe.dtype != found:  # jax without x64: float64 silently becomes float32
            raise invalid(
                "dtype",
                f"be a dtype that {self.name} creates arrays in",
                dtype,
                f"{self.name} made a {probe.dtype} array when asked for {dtype} (jax computes in "
                "float32 unless jax.config.update('jax_enable_x64', True) is set): pass "
                "dtype='float32', or enable 64-bit arrays in setup=.",
            )
        self.float_dtype = found
        self.int_dtype = self.namespace.int64

    def describe(self) -> str:
        """``"torch float32"``: the library and the dtype, for reports."""
        return f"{self.name} {self.dtype_name}"

    def to_candidate(self, value: Any) -> Any:
        """Numpy floats → the candidate's float dtype; integers → int64; booleans stay boolean;
        lists, tuples and dicts element by element; scalars unchanged."""
        xp = self.namespace
        if isinstance(value, np.ndarray):
            if value.dtype.kind == "f":
                return xp.asarray(value, dtype=self.float_dtype)
            if value.dtype.kind in "iu":
                return xp.asarray(value.astype(np.int64), dtype=self.int_dtype)
            if value.dtype.kind == "b":
                return xp.asarray(value, dtype=xp.bool)
            return value
        if isinstance(value, list):
            return [self.to_candidate(v) for v in value]
        if isinstance(value, tuple):
            return tuple(self.to_candidate(v) for v in value)
        if isinstance(value, Mapping):
            return {k: self.to_candidate(v) for k, v in value.items()}
        return value

    def seen(self, value: Any) -> Any:
        """``value`` as the candidate received it, back in numpy: floats rounded to its dtype
        (as float64), everything else unchanged."""
        if isinstance(value, np.ndarray) and value.dtype.kind == "f":
            return self.to_numpy(self.to_candidate(value))
        if isinstance(value, list):
            return [self.seen(v) for v in value]
        if isinstance(value, tuple):
            return tuple(self.seen(v) for v in value)
        if isinstance(value, Mapping):
            return {k: self.seen(v) for k, v in value.items()}
        return value

    @staticmethod
    def to_numpy(value: Any) -> NDArray[np.float64]:
        """Any array (any library, device, dtype, also a Python scalar) as float64 numpy."""
        if isinstance(value, (np.ndarray, np.generic, int, float, bool)):
            return np.asarray(value, dtype=np.float64)
        import array_api_compat

        if not array_api_compat.is_array_api_obj(value):
            return np.asarray(value, dtype=np.float64)
        xp = array_api_compat.array_namespace(value)
        detach = getattr(value, "detach", None)
        if callable(detach):  # a torch tensor that requires grad cannot be read otherwise
            value = detach()
        if not array_api_compat.is_jax_array(value):  # jax's device_put takes no "cpu" string;
            value = array_api_compat.to_device(value, "cpu")  # np.asarray copies it to the host
        if value.dtype != xp.bool and not xp.isdtype(value.dtype, "real floating"):
            value = xp.astype(value, xp.float64)
        elif value.dtype not in (getattr(xp, "float64", None), getattr(xp, "float32", None)):
            value = xp.astype(value, xp.float32)  # bfloat16 and float16: exact in float32
        return np.asarray(value, dtype=np.float64)

    @property
    def autodiff(self) -> str | None:
        """The automatic differentiation the bridge drives for this library: ``"torch"``,
        ``"jax"``, or None (numpy and other array-API libraries without autograd)."""
        root = self.name.split(".")[0]
        return root if root in ("torch", "jax") else None

    def value_and_vjp(
        self,
        func: Any,
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        *,
        wrt: int,
        cotangent: NDArray[np.float64],
        pick: Any = None,
    ) -> tuple[Any, NDArray[np.float64]]:
        """Call ``func(*args, **kwargs)`` (inputs already in the candidate's library) and return
        its raw output with the vector–Jacobian product ``∂(Σ cotangent · out)/∂args[wrt]``,
        computed by the library's own autograd, as float64 numpy.

        This is the one place that speaks a library's autodiff; every gradient check goes through
        it. ``pick(raw) -> array`` selects the differentiated output when the candidate returns
        several (default: the output itself). The cotangent is given in the output's dtype, so a
        bfloat16 candidate differentiates in bfloat16 as it would in training. An output that
        does not depend on ``args[wrt]`` has a zero gradient.

        Raises
        ------
        NoAutodiff
            For numpy and libraries without an autodiff the bridge knows.
        """
        select = (lambda raw: raw) if pick is None else pick
        engine = self.autodiff
        if engine == "torch":
            return self._torch_vjp(func, args, kwargs, wrt, cotangent, select)
        if engine == "jax":
            return self._jax_vjp(func, args, kwargs, wrt, cotangent, select)
        raise NoAutodiff(
            f"{self.name} has no automatic differentiation that refimpl can drive; pass "
            "xp='torch' or xp='jax.numpy', or have the candidate return its gradient "
            "(conventions={'gradient': 'returned'})."
        )

    def _torch_vjp(
        self,
        func: Any,
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        wrt: int,
        cotangent: NDArray[np.float64],
        select: Any,
    ) -> tuple[Any, NDArray[np.float64]]:
        import torch

        x = args[wrt].detach().clone().requires_grad_(True)
        given = (*args[:wrt], x, *args[wrt + 1 :])
        with torch.enable_grad():
            raw = func(*given, **kwargs)
            out = select(raw)
            if not isinstance(out, torch.Tensor) or not out.requires_grad:
                return raw, np.zeros(tuple(x.shape), dtype=np.float64)
            c = torch.as_tensor(np.asarray(cotangent), dtype=out.dtype).reshape(out.shape)
            (grad,) = torch.autograd.grad(out, x, grad_outputs=c, allow_unused=True)
        if grad is None:
            return raw, np.zeros(tuple(x.shape), dtype=np.float64)
        return raw, self.to_numpy(grad)

    def _jax_vjp(
        self,
        func: Any,
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        wrt: int,
        cotangent: NDArray[np.float64],
        select: Any,
    ) -> tuple[Any, NDArray[np.float64]]:
        import jax

        def differentiated(x: Any) -> tuple[Any, Any]:
            raw = func(*args[:wrt], x, *args[wrt + 1 :], **kwargs)
            return select(raw), raw  # the raw output comes back concrete, as jax's aux

        out, pullback, raw = jax.vjp(differentiated, args[wrt], has_aux=True)
        c = self.namespace.asarray(np.asarray(cotangent), dtype=out.dtype)
        (grad,) = pullback(self.namespace.reshape(c, out.shape))
        return raw, self.to_numpy(grad)
