"""The lognormal length law of agent rollouts on the command line, without ``scipy.stats``.

``refimpl simulate --tool-turns ...`` draws rollout lengths from lognormal(``--mu``, ``--sigma``)
as a frozen law (the agent simulator draws a law ``rvs(size=512)`` at a time). Importing
``scipy.stats`` for that law took 0.5-1.3 s of a fresh call, more than the run of :math:`10^6`
rollouts it fed; :class:`LognormalLaw` draws the same numbers, bit for bit, as
``scipy.stats.lognorm(s=sigma, scale=exp(mu))`` with the same generator, and imports nothing.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from refimpl._validation import as_float_array, as_real, invalid, wrong_type

__all__ = ["LognormalLaw"]


class LognormalLaw:
    r"""The lognormal law of :math:`L = e^{\mu + \sigma Z}`, :math:`Z \sim N(0, 1)`, as a frozen law.

    .. math::

        F(\ell) = \Phi\!\left(\frac{\ln \ell - \mu}{\sigma}\right), \qquad
        \mathbb{E}[L] = e^{\mu + \sigma^2/2}.

    Parameters
    ----------
    mu : float
        Log-scale location (the median is :math:`e^\mu`); finite.
    sigma : float
        Log-scale spread; finite and > 0.

    Notes
    -----
    :meth:`rvs` computes what ``scipy.stats.lognorm(s=sigma, scale=math.exp(mu)).rvs(size,
    random_state=gen)`` computes (scipy 1.17: ``exp(s * gen.standard_normal(size)) * scale + 0``),
    in the same float64 operations, so a run gives the same trace with either law
    (``tests/test_sim_agent_lognormal.py`` compares the draws with scipy's, bit for bit). Numpy's own
    ``Generator.lognormal`` rounds differently (:math:`e^{\mu + \sigma z}` rather than
    :math:`e^{\sigma z} e^{\mu}`) and is not used. :meth:`cdf`, :meth:`ppf`, :meth:`pdf` and
    :meth:`mean` agree with scipy's to a few ulps.

    Examples
    --------
    >>> law = LognormalLaw(mu=6.0, sigma=1.0)
    >>> law
    LognormalLaw(mu=6.0, sigma=1.0)
    >>> law.rvs(size=3, random_state=np.random.default_rng(0)).round(3)
    array([457.479, 353.504, 765.418])
    >>> round(float(law.mean()), 6), float(law.ppf(0.5)) == math.exp(6.0)
    (665.141633, True)
    """

    __slots__ = ("mu", "scale", "sigma")

    def __init__(self, *, mu: float, sigma: float) -> None:
        self.mu = as_real(mu, name="mu", meaning="log-scale location")
        self.sigma = as_real(sigma, name="sigma", low=0.0, low_open=True)
        if not -745.0 <= self.mu <= 709.0:  # exp(mu) underflows to 0 or overflows past these
            raise invalid(
                "mu",
                "give a median exp(mu) that float64 holds (> 0, finite)",
                mu,
                "Pass mu in [-745, 709] (mu=6: a median of 403 tokens).",
            )
        self.scale = math.exp(self.mu)  # scipy's scale: the median

    def __repr__(self) -> str:
        return f"LognormalLaw(mu={self.mu!r}, sigma={self.sigma!r})"

    def rvs(self, size: int | tuple[int, ...] = 1, random_state: Any = None) -> NDArray[np.float64]:
        """``size`` draws from ``random_state`` (a :class:`numpy.random.Generator`), as scipy draws."""
        if not isinstance(random_state, (np.random.Generator, np.random.RandomState)):
            raise wrong_type(
                "random_state",
                "a numpy.random.Generator",
                random_state,
                "Pass random_state=numpy.random.default_rng(seed).",
            )
        z = random_state.standard_normal(size)
        out: NDArray[np.float64] = np.exp(self.sigma * z) * self.scale
        return out

    def cdf(self, x: ArrayLike) -> Any:
        """:math:`P(L \\le x)`: 0 for :math:`x \\le 0`."""
        arr = as_float_array(x, name="x")
        pos = np.maximum(arr, np.finfo(np.float64).tiny)
        t = -np.log(pos / self.scale) / (self.sigma * math.sqrt(2.0))  # no cancellation near e^mu
        out = np.where(arr > 0.0, 0.5 * _erfc(t), 0.0)
        return out[()] if out.ndim == 0 else out

    def ppf(self, q: ArrayLike) -> Any:
        """The quantile: ``ppf(0) = 0``, ``ppf(1) = inf``; ``q`` outside [0, 1] is refused."""
        arr = as_float_array(q, name="q")
        if np.any((arr < 0.0) | (arr > 1.0)):
            raise invalid("q", "lie in [0, 1] (a probability)", q, "Pass probabilities in [0, 1].")
        normal = statistics.NormalDist(self.mu, self.sigma)
        flat = [
            0.0 if p == 0.0 else math.inf if p == 1.0 else math.exp(normal.inv_cdf(p))
            for p in arr.ravel().tolist()
        ]
        out = np.asarray(flat, dtype=np.float64).reshape(arr.shape)
        return out[()] if out.ndim == 0 else out

    def pdf(self, x: ArrayLike) -> Any:
        """The density: 0 for :math:`x \\le 0`."""
        arr = as_float_array(x, name="x")
        pos = np.maximum(arr, np.finfo(np.float64).tiny)
        z = np.log(pos / self.scale) / self.sigma
        dens = np.exp(-0.5 * z * z) / (pos * self.sigma * math.sqrt(2.0 * math.pi))
        out = np.where(arr > 0.0, dens, 0.0)
        return out[()] if out.ndim == 0 else out

    def mean(self) -> np.float64:
        """:math:`e^{\\mu + \\sigma^2/2}` (inf past float64's range)."""
        with np.errstate(over="ignore"):
            out = np.float64(self.scale) * np.exp(np.float64(self.sigma) ** 2 / 2.0)
        return np.float64(out)

    def support(self) -> tuple[np.float64, np.float64]:
        """``(0, inf)``."""
        return np.float64(0.0), np.float64(np.inf)


def _erfc(t: NDArray[np.float64]) -> NDArray[np.float64]:
    """The complementary error function, elementwise (``math.erfc``; numpy has none)."""
    flat = [math.erfc(v) for v in t.ravel().tolist()]
    return np.asarray(flat, dtype=np.float64).reshape(t.shape)
