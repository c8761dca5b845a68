"""pass^k, pass@k and verdict flips over repeated trials: the estimators against hand-computed values and a
brute-force enumeration, and the table on a synthetic results frame with known flips."""

from __future__ import annotations

from itertools import combinations

import pandas as pd
import pytest

from aft_bench.analysis.trials import pass_at, pass_hat, trials_table
from aft_bench.experiment.comparisons import load_comparisons


@pytest.mark.parametrize("n, c", [(3, 0), (3, 2), (4, 4), (5, 3), (6, 1)])
def test_estimators_equal_the_average_over_every_subset_of_k_trials(n: int, c: int) -> None:
    trials = [1] * c + [0] * (n - c)
    for k in range(1, n + 1):
        subsets = list(combinations(trials, k))
        assert pass_hat(n, c, k) == pytest.approx(sum(all(s) for s in subsets) / len(subsets))
        assert pass_at(n, c, k) == pytest.approx(sum(any(s) for s in subsets) / len(subsets))


def test_hand_computed_values() -> None:
    assert pass_hat(3, 2, 2) == pytest.approx(1 / 3) and pass_at(3, 2, 2) == 1.0 and pass_at(3, 0, 3) == 0.0


def test_the_table_reports_pass_k_and_flips_per_arm() -> None:
    comp = next(c for c in load_comparisons() if c.id == "duplicate_effects")
    rows = []
    for task, treat, ctrl in (("a", [1, 1, 1], [1, 0, 0]), ("b", [1, 1, 0], [0, 0, 0])):
        for cond, outcomes in ((comp.treatment, treat), (comp.control, ctrl)):
            for rep, ok in enumerate(outcomes):
                rows.append({"world": "w", "backend": "memory", "workload": comp.workload, "task_id": task,
                             "condition": cond, "fault": "f", "fault_seed": 0, "catalog_size": None,
                             "agent": "llm", "agent_spec": "{}", "rep": rep, "y_correct": bool(ok)})
    table = pd.DataFrame(trials_table(pd.DataFrame(rows), (comp,)))
    treat = table[(table["arm"] == "treatment")].set_index("k")
    assert treat.loc[1, "pass_hat_k"] == pytest.approx(5 / 6) and treat.loc[3, "pass_hat_k"] == pytest.approx(0.5)
    assert treat.loc[1, "flip_rate"] == 0.5  # task b's trials disagree
    ctrl = table[(table["arm"] == "control")].set_index("k")
    assert ctrl.loc[3, "pass_at_k"] == pytest.approx(0.5) and ctrl.loc[2, "pass_hat_k"] == 0.0


def test_one_trial_per_tuple_gives_no_table() -> None:
    df = pd.DataFrame({"rep": [0, 0], "workload": ["x", "x"], "condition": ["I0", "I5"], "y_correct": [True, False]})
    assert trials_table(df, load_comparisons()) == []
