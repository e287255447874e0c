"""Every validation rule of every public formula function, tested at its boundary from one table.

The rules are not listed here: they are found by running one valid call of each public function
(``tests/_valid_calls.py``) with the validation builders recorded (``tests/_rules.py``). For every
rule applied to a caller's argument the test then moves that argument to each side of the bound:

- a closed real bound ``b``: ``b`` is accepted and the next float outside (``np.nextafter``) is
  refused; an open bound: ``b`` is refused and the next float inside accepted; NaN and infinity
  are refused naming the parameter;
- an integer bound ``b``: ``b`` accepted, ``b - 1`` (or ``b + 1`` above) refused; on an array the
  smallest (largest) entry is moved;
- a choice: every choice accepted, a near miss (upper case, a trailing space) refused;
- two parameters in order: equal accepted (refused when strict), swapped refused.

A refusal must come from the rule's own builder (not a later check that happens to catch the
value) and its message must name the parameter, state the bound, show the value and say the fix.
Where moving one argument breaks ANOTHER rule (coupled parameters), :data:`COUPLED` says so with
the reason, and the test checks that the other rule is the one that refuses.

What the code applies is also compared with a reviewed table, ``tests/data/validation_rules.txt``
(one line per rule and valid call): the boundary cases alone follow the code, so a bound moved by
one would move its own test with it; the table is what says where the bound belongs.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pytest
from _rules import (
    Case,
    Found,
    Rule,
    bind,
    cases,
    declared,
    discover,
    hand_rule,
    load_formula_modules,
    public_function,
    run_case,
    table_lines,
)
from _valid_calls import ALSO_PUBLISHED, FORMULA_MODULES, HAND_RULES, VALID_CALLS, Call
from _wrong_variants import rejects

import refimpl._validation as v
from refimpl.errors import InvalidArgument

DATA = Path(__file__).parent / "data"
PUBLIC_API = DATA / "public_api.txt"
RULE_TABLE = DATA / "validation_rules.txt"


class Coupling(NamedTuple):
    """Why moving one argument alone trips another rule, and what the case does instead.

    With ``also`` (the other arguments moved with it, to values that satisfy the other rule) the
    case keeps its expectation; with ``also=None`` the call must be refused by the other rule
    (and not by the rule under test).
    """

    reason: str
    also: dict[str, Any] | None = None


#: (function key, index of its valid call, case label) -> the coupling. Labels are those the
#: failure messages print.
COUPLED: dict[tuple[str, int | None, str], Coupling] = {
    **{
        (f"refimpl.dispatch {name}", None, "int: n >= 1: low inside 1"): Coupling(
            "k <= n (the batch is the first k of the n launched): n = 1 needs k = 1", {"k": 1}
        )
        for name in (
            "inclusion_probability",
            "inclusion_probability_pmf",
            "ipw_estimator_moments",
            "ipw_weights",
            "length_bias",
            "selected_mean",
            "selected_pmf",
        )
    },
    **{
        (f"refimpl.dispatch {name}", 0, label): Coupling(
            "k <= n, and values and pi carry one entry per batch member (k of them)",
            {"k": 1, "n": 1, "values": [3.0], "pi": [0.5]},
        )
        for name in ("clipped_ipw_estimate", "horvitz_thompson_estimate")
        for label in ("int: n >= 1: low inside 1", "int: k >= 1: low inside 1")
    },
    **{
        (f"refimpl.dispatch {name}", 0, "range: pi >= 0.0 and pi <= 1.0: low inside 0.0"): Coupling(
            "pi = 0 is a probability but has no inverse weight: its own rule pi > 0 refuses it"
        )
        for name in (
            "clipped_ipw_estimate",
            "hajek_estimate",
            "horvitz_thompson_estimate",
            "ipw_weights",
        )
    },
    **{
        (f"refimpl.effort {name}", None, "real: k0 >= 0.0: low inside 0.0"): Coupling(
            "k0 = 0 is a penalty, but no optimal length exists (longer is always better): "
            "the optimum's own rule k0 > 0 refuses it"
        )
        for name in (
            "adaptive_gap",
            "effort_frontier",
            "optimal_length",
            "train_conditioned_policy",
            "train_effort_policy",
        )
    },
    **{
        (f"refimpl.effort {name}", None, "real: tau > 0.0: low inside 5e-324"): Coupling(
            "lambda (b - b_min) / tau overflows for the smallest tau unless b = b_min", {"b": [0.0]}
        )
        for name in ("adaptive_gap", "effort_frontier", "optimal_length")
    },
    ("refimpl.effort difficulty_mix", 0, "real: median > 0.0: low inside 5e-324"): Coupling(
        "median exp(sigma z) underflows to 0 for the smallest median unless sigma = 0",
        {"sigma": 0.0},
    ),
    ("refimpl.effort shaped_reward", 0, "real: length_scale > 0.0: low inside 5e-324"): Coupling(
        "k(b) length / length_scale overflows for the smallest length_scale unless length = 0",
        {"length": [0.0, 0.0]},
    ),
    ("refimpl.effort train_conditioned_policy", 0, "real: q_max > 0.0: low outside 0.0"): Coupling(
        "q_max is checked twice (in (0, 1] as a probability, then > 0 by the effort problem): "
        "the first check refuses 0"
    ),
    **{
        (f"refimpl.losses {name}", None, "real: temperature > 0.0: low inside 5e-324"): Coupling(
            "logits / temperature overflows for the smallest temperature unless the logits are 0",
            {"logits": np.zeros((1, 2, 4))},
        )
        for name in (
            "token_entropy",
            "token_logprobs",
            "token_logprobs_grad",
            "token_sum_pi_squared",
        )
    },
    ("refimpl.losses token_sum_pi_squared_grad", 0, "real: temperature > 0.0: low inside 5e-324"): (
        Coupling(
            "logits / temperature and 2·cotangent / temperature overflow for the smallest "
            "temperature unless the logits and the cotangent are 0",
            {"logits": np.zeros((1, 2, 4)), "cotangent": np.zeros((1, 2))},
        )
    ),
    **{
        (f"refimpl.losses {name}", 0, f"real: {tau} > 0.0: low inside 5e-324"): Coupling(
            "the gate's 4 / tau overflows for the smallest tau at any token: the loss's own "
            "finiteness rule refuses it"
        )
        for name in ("sapo_loss", "sapo_sequence_loss")
        for tau in ("tau_pos", "tau_neg")
    },
    **{
        (f"refimpl.losses {name}", None, f"mode={mode!r}"): Coupling(reason, also)
        for name in ("aggregate_loss", "partition_gap", "split_weights")
        for mode, reason, also in (
            ("token_sum_norm", "token_sum_norm divides by a declared constant", {"constant": 4.0}),
            ("group_mean", "group_mean needs the prompt of each sequence", {"group": [0, 1]}),
        )
    },
    **{
        ("refimpl.losses aggregation_weights", call, f"mode={mode!r}"): Coupling(
            "constant is given exactly for token_sum_norm, group exactly for group_mean",
            {"constant": 4.0 if mode == "token_sum_norm" else None}
            | ({"group": [0, 1]} if mode == "group_mean" else {}),
        )
        for call in (0, 1)
        for mode in (
            "token_sum",
            "token_mean",
            "seq_mean_token_mean",
            "seq_mean_token_sum",
            "token_sum_norm",
            "group_mean",
        )
    },
    ("refimpl.losses aggregation_weights", 1, "int: token_count >= 1: low inside 1"): Coupling(
        "a declared token count covers at least this batch's valid tokens", {"mask": [[1, 0, 0]]}
    ),
    **{
        ("refimpl.losses length_weight", None, f"mode={mode!r}"): Coupling(
            "token_count is given only for token_mean, constant exactly for token_sum_norm",
            {
                "token_count": 5 if mode == "token_mean" else None,
                "constant": 4.0 if mode == "token_sum_norm" else None,
            },
        )
        for mode in (
            "token_sum",
            "token_mean",
            "seq_mean_token_mean",
            "seq_mean_token_sum",
            "token_sum_norm",
        )
    },
    ("refimpl.losses token_logprobs_grad", 0, "real: temperature > 0.0: low inside 5e-324"): (
        Coupling(
            "even at zero logits the gradient cotangent/temperature leaves float64 for the "
            "smallest temperature: the gradient's own finiteness rule refuses it"
        )
    ),
    ("refimpl.effort train_effort_policy", 0, "real: initial_spread > 0.0: low inside 5e-324"): (
        Coupling(
            "the score (x - mu)/sigma^2 is 0/0 once sigma^2 underflows: the rule that sigma^2 is "
            "a normal float64 refuses the smallest spread"
        )
    ),
    ("refimpl.losses aggregation_weights", 0, "real: constant > 0.0: low inside 5e-324"): Coupling(
        "the weight 1/(S H) leaves float64 for the smallest H: the weight's finiteness rule "
        "refuses it"
    ),
    ("refimpl.losses length_weight", 1, "real: constant > 0.0: low inside 5e-324"): Coupling(
        "the weight 1/(S H) leaves float64 for the smallest H: the weight's finiteness rule "
        "refuses it"
    ),
    **{
        ("refimpl.losses gpg_advantages", call, "real: f_norm > 0.0: low inside 5e-324"): Coupling(
            "alpha (r - mean) / f_norm leaves float64 for the smallest f_norm: the advantages' "
            "finiteness rule refuses it"
        )
        for call in (0, 1)
    },
    ("refimpl.losses dppo_loss", 0, "surrogate='ratio'"): Coupling(
        "SkyRL's ratio surrogate has no truncation: cap must be None", {"cap": None}
    ),
    **{
        (f"refimpl.losses {name}", 0, f"estimator={est!r}"): Coupling(
            "low_var_kl fixes verl's clamps itself: clamp and log_ratio_clamp must be None",
            {"clamp": None, "log_ratio_clamp": None},
        )
        for name in ("importance_weighted_kl", "kl_penalty")
        for est in ("low_var_kl", "low_var_kl+")
    },
    ("refimpl.losses rloo_advantages", 0, "singleton='error'"): Coupling(
        "singleton='error' refuses a group of one: every group gets two", {"group": [0, 0, 1, 1]}
    ),
    **{
        (
            "refimpl.penalties dapo_overlong_penalty",
            call,
            "real: max_length > 0.0: low inside 5e-324",
        ): (Coupling("cache_length <= max_length", {"cache_length": 5e-324, "floor": True}))
        for call in (0, 1)
    },
    ("refimpl.penalties dapo_overlong_penalty", 1, "real: cache_length > 0.0: low inside 5e-324"): (
        Coupling(
            "unfloored, the penalty (max_length - cache_length - L) / cache_length overflows for "
            "the smallest cache_length: its own finiteness rule refuses it"
        )
    ),
    **{
        ("refimpl.losses decoupled_ppo_loss", 1, f"metric={m!r}"): Coupling(
            "a KL estimate only rejects (above_cap='mask'): the clamp is the ratio's",
            {"above_cap": "mask"},
        )
        for m in ("kl_k1", "kl_k2", "kl_k3")
    },
    **{
        ("refimpl.losses decoupled_ppo_loss", i, "above_cap='clip'"): Coupling(
            "a KL metric refuses the clamp: the rule 'above_cap must be mask' refuses it"
        )
        for i in (3, 4)
    },
    ("refimpl.losses decoupled_ppo_loss", 3, "metric='ratio'"): Coupling(
        "a ratio's cap is >= 1, a KL cap (0.5 here) is not", {"cap": 1.5}
    ),
    ("refimpl.losses decoupled_ppo_loss", 3, "real: cap > 0.0: low inside 5e-324"): Coupling(
        "lower <= cap: the smallest cap needs no lower bound", {"lower": None}
    ),
    ("refimpl.losses decoupled_ppo_loss", 4, "metric='ratio'"): Coupling(
        "a ratio's bounds are cap >= 1 and lower in [0, 1], k1's may be negative",
        {"cap": 1.5, "lower": None},
    ),
    **{
        ("refimpl.losses decoupled_ppo_loss", 4, f"metric={m!r}"): Coupling(
            "k2 and k3 are >= 0, so their cap is > 0 (k1's may be negative)", {"cap": 0.5}
        )
        for m in ("kl_k2", "kl_k3")
    },
    ("refimpl.staleness masked_is_weights", None, "low <= high: equal"): Coupling(
        "the band [low, high] must contain ratio 1 (low <= 1 <= high): equal only at 1",
        {"low": 1.0, "high": 1.0},
    ),
    ("refimpl.staleness masked_is_weights", None, "low <= high: swapped"): Coupling(
        "low <= 1 <= high, so a swapped band has low > 1: low's own bound refuses it first"
    ),
    **{
        ("refimpl.staleness over_masking_scenarios", 0, f"int: trained_step >= 0: low {side}"): (
            Coupling(
                "sample_staleness's trained_step >= 0, reached inside, is shadowed by the "
                "scenario's own trained_step >= 3"
            )
        )
        for side in ("inside 0", "outside -1")
    },
    ("refimpl.staleness sample_staleness", 0, "int: trained_step >= 0: low inside 0"): Coupling(
        "token versions are <= trained_step", {"token_versions": np.zeros((2, 4), dtype=int)}
    ),
    ("refimpl.staleness sample_staleness", 1, "int: trained_step >= 0: low inside 0"): Coupling(
        "token versions are <= trained_step", {"token_versions": [[0, 0, 0, 0], [0, 0]]}
    ),
}


#: Cases that fail today: a RuntimeWarning (or another non-refimpl error) at a valid argument.
#: Listed, not skipped: each must still fail as described (a fix makes the test say to remove
#: the entry), and each is a defect to fix at its call site.
DEFECTS: dict[tuple[str, int | None, str], str] = {}


def _public_functions() -> list[str]:
    keys = []
    for line in PUBLIC_API.read_text().splitlines():
        parts = line.split()
        if line.startswith("#") or len(parts) != 2:
            continue
        if parts[0] not in FORMULA_MODULES and line not in ALSO_PUBLISHED:
            continue
        if inspect.isfunction(public_function(line)):
            keys.append(line)
    return keys


Discovered = tuple[tuple[int, dict[str, Any], tuple[Found, ...]], ...]


def discover_calls(fn: Callable[..., Any], calls: tuple[Call, ...]) -> Discovered:
    """The rules each valid call applies, with the call's arguments by name."""
    out = []
    for i, call in enumerate(calls):
        arguments = bind(fn, call.args, call.kwargs)
        out.append((i, arguments, tuple(discover(fn, arguments))))
    return tuple(out)


def generated_cases(
    key: str,
    found: Discovered,
    coupled: Mapping[tuple[str, int | None, str], Coupling],
    hand_rules: tuple[Rule, ...] | None = None,
) -> list[tuple[int, dict[str, Any], Case]]:
    """Every boundary case of every rule found or declared, with the couplings applied."""
    out = []
    declared_rules = HAND_RULES.get(key, ()) if hand_rules is None else hand_rules
    for i, arguments, rules in found:
        of_call = HAND_RULES.get(f"{key} #{i}", ()) if hand_rules is None else ()
        hand = [declared(rule, arguments) for rule in (*declared_rules, *of_call)]
        for f in [*rules, *(h for h in hand if h is not None)]:
            for case in cases(f, arguments):
                coupling = coupled.get((key, i, case.label), coupled.get((key, None, case.label)))
                if coupling is not None and coupling.also is None:
                    case = replace(case, expect="refused_by_other")
                elif coupling is not None and coupling.also is not None:
                    case = replace(case, changes={**case.changes, **coupling.also})
                out.append((i, arguments, case))
    return out


def rule_failures(
    key: str,
    fn: Callable[..., Any],
    calls: tuple[Call, ...],
    *,
    table: list[str],
    coupled: Mapping[tuple[str, int | None, str], Coupling] = {},
    defects: Mapping[tuple[str, int | None, str], str] = {},
    hand_rules: tuple[Rule, ...] | None = None,
) -> list[str]:
    """Why ``fn``'s rules are not as ``table`` says, or not enforced at their boundaries."""
    found = discover_calls(fn, calls)
    applied = [line for i, _, rules in found for line in table_lines(key, i, list(rules))]
    failures = [
        f"applied but not in the rule table: {line}" for line in applied if line not in table
    ]
    failures += [
        f"in the rule table but not applied: {line}" for line in table if line not in applied
    ]
    for i, arguments, case in generated_cases(key, found, coupled, hand_rules):
        why = run_case(fn, arguments, case)
        defect = defects.get((key, i, case.label), defects.get((key, None, case.label)))
        if defect is not None and (why is None or not why.startswith("raised ")):
            failures.append(
                f"call {i}, {case.label!r} no longer fails with a foreign error ({why}): "
                "move it from DEFECTS (to COUPLED if another rule refuses it now)"
            )
        elif defect is None and why is not None:
            failures.append(f"call {i}, {case.label!r}: {why}")
    return failures


def _table(key: str) -> list[str]:
    return [line for line in RULE_TABLE.read_text().splitlines() if line.startswith(f"{key} #")]


def check_rules(key: str) -> None:
    """Every rule of ``key`` is the table's and holds at its boundary (one message lists all)."""
    load_formula_modules(FORMULA_MODULES)
    fn = public_function(key)
    failures = rule_failures(
        key, fn, VALID_CALLS[key], table=_table(key), coupled=COUPLED, defects=DEFECTS
    )
    assert not failures, (
        f"{key}:\n  " + "\n  ".join(failures) + "\n(a reviewed change of a rule: regenerate the "
        "table with `.venv/bin/python tests/_rules.py > tests/data/validation_rules.txt`)"
    )


def test_every_public_function_has_a_valid_call() -> None:
    missing = sorted(set(_public_functions()) - set(VALID_CALLS))
    assert not missing, f"add a valid call to tests/_valid_calls.py for: {missing}"
    unknown = sorted(set(VALID_CALLS) - set(_public_functions()))
    assert not unknown, f"tests/_valid_calls.py names functions that are not public: {unknown}"


def test_every_hand_rule_names_a_valid_call() -> None:
    """``HAND_RULES`` keys are a function (every call) or ``"<function> #<i>"`` (call ``i``)."""
    for key in HAND_RULES:
        name, _, index = key.partition(" #")
        assert name in VALID_CALLS, f"HAND_RULES names no valid call: {key!r}"
        assert not index or int(index) < len(VALID_CALLS[name]), f"no such call: {key!r}"


@pytest.mark.parametrize("key", sorted(VALID_CALLS))
def test_every_rule_holds_at_its_boundary(key: str) -> None:
    check_rules(key)


def test_every_listed_case_is_generated() -> None:
    load_formula_modules(FORMULA_MODULES)
    generated: set[tuple[str, int | None, str]] = set()
    for key in VALID_CALLS:
        found = discover_calls(public_function(key), VALID_CALLS[key])
        for i, _, case in generated_cases(key, found, {}):
            generated |= {(key, i, case.label), (key, None, case.label)}
    stale = sorted(set(COUPLED) - generated) + sorted(set(DEFECTS) - generated)
    assert not stale, f"COUPLED or DEFECTS list cases no rule generates any more: {stale}"
    lines = RULE_TABLE.read_text().splitlines()
    tabled = {line.split(" #")[0] for line in lines if not line.startswith("#")}
    assert tabled <= set(VALID_CALLS), f"the rule table names unknown functions: {tabled}"


# --- the checker must be able to fail: wrong variants of a small function -----------------


def _right(x: Any, *, n: Any, tau: Any, mode: Any = "mean") -> float:
    """A function with one rule of each common kind, applied the way refimpl applies them.

    The builders are called through their module, which :func:`_rules.recording` wraps.
    """
    count = v.as_int(n, name="n", minimum=2)
    if count > 10:  # a rule written by hand, declared in _HAND
        raise v.invalid("n", "be <= 10", n, "Pass n <= 10.")
    scale = v.as_real(tau, name="tau", low=0.0, low_open=True)
    v.require_one_of(mode, ("mean", "sum"), name="mode")
    return float(np.sum(x)) * scale / (count if mode == "mean" else 1)


_CALLS = (Call(([1.0, 2.0],), {"n": 3, "tau": 0.5}),)
_KEY = "tests.toy f"
_TABLE = [
    f"{_KEY} #0 direct int: n >= 2",
    f"{_KEY} #0 direct real: tau > 0.0",
    f"{_KEY} #0 direct mode in ('mean', 'sum')",
]


_HAND = (hand_rule("int", "n", high=10),)


def _hand_raise_removed(x: Any, *, n: Any, tau: Any, mode: Any = "mean") -> float:
    return _right(x, n=min(int(n), 10), tau=tau, mode=mode)  # n > 10 goes through


def _hand_bound_moved(x: Any, *, n: Any, tau: Any, mode: Any = "mean") -> float:
    if isinstance(n, int) and n > 9:  # n <= 10 made n <= 9
        raise v.invalid("n", "be <= 9", n, "Pass n <= 9.")
    return _right(x, n=n, tau=tau, mode=mode)


def _raise_removed(x: Any, *, n: Any, tau: Any, mode: Any = "mean") -> float:
    try:
        return _right(x, n=n, tau=tau, mode=mode)
    except InvalidArgument:  # the refusal skipped: the bad call goes on
        return 0.0


def _bound_moved(x: Any, *, n: Any, tau: Any, mode: Any = "mean") -> float:
    v.as_int(n, name="n", minimum=3)  # minimum=2 -> 3
    return _right(x, n=n, tau=tau, mode=mode)


def _open_made_closed(x: Any, *, n: Any, tau: Any, mode: Any = "mean") -> float:
    v.as_real(tau, name="tau", low=0.0)  # (0, inf) -> [0, inf): the bound itself accepted
    return _right(x, n=n, tau=max(float(tau), 1e-300), mode=mode)


def _stricter_by_hand(x: Any, *, n: Any, tau: Any, mode: Any = "mean") -> float:
    if isinstance(n, int) and n < 3:  # a hand check that refuses the rule's own boundary
        raise v.invalid("n", "be >= 3", n, "Pass n >= 3.")
    return _right(x, n=n, tau=tau, mode=mode)


def _message_without_fix(x: Any, *, n: Any, tau: Any, mode: Any = "mean") -> float:
    try:
        return _right(x, n=n, tau=tau, mode=mode)
    except InvalidArgument as error:
        raise InvalidArgument(str(error).split("; got")[0]) from None


def _option_unchecked(x: Any, *, n: Any, tau: Any, mode: Any = "mean") -> float:
    if mode not in ("mean", "sum"):  # a near miss ("MEAN") silently means "sum"
        mode = "sum"
    return _right(x, n=n, tau=tau, mode=mode)


def _assert_rules_hold(fn: Callable[..., Any]) -> None:
    failures = rule_failures(_KEY, fn, _CALLS, table=_TABLE, hand_rules=_HAND)
    assert not failures, "\n".join(failures)


def test_the_checker_passes_the_right_function() -> None:
    _assert_rules_hold(_right)


@pytest.mark.parametrize(
    "wrong",
    [
        _raise_removed,
        _bound_moved,
        _open_made_closed,
        _stricter_by_hand,
        _message_without_fix,
        _option_unchecked,
        _hand_raise_removed,
        _hand_bound_moved,
    ],
)
def test_the_checker_rejects_a_wrong_variant(wrong: Callable[..., Any]) -> None:
    rejects(_assert_rules_hold, wrong)


def test_the_checker_rejects_a_builder_message_without_the_fix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_fix(name: str, rule: str, value: Any, fix: str) -> InvalidArgument:
        return InvalidArgument(f"{name} must {rule}")

    monkeypatch.setattr(v, "invalid", no_fix)
    rejects(_assert_rules_hold, _right)


def _overflows(x: Any, *, n: Any, tau: Any, mode: Any = "mean") -> float:
    """Wrong: the smallest valid tau overflows with a RuntimeWarning instead of a result."""
    value = _right(x, n=n, tau=tau, mode=mode)
    return float(np.float64(1.0) / np.float64(tau)) * value


_TINY_TAU: tuple[str, int | None, str] = (_KEY, 0, "real: tau > 0.0: low inside 5e-324")


def test_a_listed_defect_must_keep_failing_with_a_foreign_error() -> None:
    failures = rule_failures(_KEY, _overflows, _CALLS, table=_TABLE, hand_rules=_HAND)
    assert any("RuntimeWarning" in f for f in failures), failures  # unlisted: a failure
    listed: dict[tuple[str, int | None, str], str] = {_TINY_TAU: "RuntimeWarning: 1/tau overflows"}
    failures = rule_failures(
        _KEY, _overflows, _CALLS, table=_TABLE, hand_rules=_HAND, defects=listed
    )
    assert not failures, failures
    fixed = rule_failures(_KEY, _right, _CALLS, table=_TABLE, hand_rules=_HAND, defects=listed)
    assert any("no longer fails" in f for f in fixed), fixed  # fixed: the entry must go
