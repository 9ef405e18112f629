"""Inferential statistics and models of the demo: pure functions of arrays/frames.

Permutation tests of a difference in means, the Holm-Bonferroni correction, ordinary
least squares and a nearest-centroid classifier. The random ones take a seed, so each
run gives the same numbers. numpy is imported inside function bodies so that importing
this module stays cheap.

:class:`~argus_lab.errors.ToolError` is raised when the data cannot support the
computation (too few values or rows), so a tool that calls these fails permanently.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from argus_lab import ToolError
from argus_lab.demo.analysis import JSON, _num

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    import pandas as pd

    FloatArray = npt.NDArray[np.float64]


def permutation_pvalue(
    a: Sequence[float] | FloatArray,
    b: Sequence[float] | FloatArray,
    *,
    n_permutations: int = 9999,
    seed: int = 0,
) -> JSON:
    """Two-sided permutation test of a difference in means, with a fixed seed.

    The p-value counts the observed labelling as one of the permutations, so it is
    never 0: ``p = (1 + #{|perm diff| >= |observed diff|}) / (1 + n_permutations)``.
    """
    import numpy as np

    x = np.asarray(a, dtype=np.float64)
    y = np.asarray(b, dtype=np.float64)
    if len(x) < 2 or len(y) < 2:
        raise ToolError(f"Each group needs >= 2 values (got {len(x)} and {len(y)}).")
    pooled = np.concatenate([x, y])
    observed = x.mean() - y.mean()
    rng = np.random.default_rng(seed)
    # One row per permutation, shuffled independently: vectorised, ~3 MB at most.
    shuffled = rng.permuted(np.tile(pooled, (n_permutations, 1)), axis=1)
    diffs = shuffled[:, : len(x)].mean(axis=1) - shuffled[:, len(x) :].mean(axis=1)
    # The tolerance keeps permutations equal to the observed split (up to float
    # rounding of the sums) on the "as extreme" side.
    extreme = int((np.abs(diffs) >= abs(observed) - 1e-9).sum())
    return {
        "n_a": len(x),
        "n_b": len(y),
        "mean_a": _num(x.mean()),
        "mean_b": _num(y.mean()),
        "difference": _num(observed),
        "cohens_d": _num(cohens_d(x, y)),
        "p_value": _num((1 + extreme) / (1 + n_permutations)),
        "n_permutations": n_permutations,
        "seed": seed,
    }


def cohens_d(
    a: Sequence[float] | FloatArray, b: Sequence[float] | FloatArray
) -> float | None:
    """Standardised mean difference ``(mean a - mean b) / pooled sd``.

    Returns:
        Cohen's d, or None when a group has fewer than 2 values or the pooled
        standard deviation is 0 (the difference has no scale).
    """
    import numpy as np

    x = np.asarray(a, dtype=np.float64)
    y = np.asarray(b, dtype=np.float64)
    if len(x) < 2 or len(y) < 2:
        return None
    pooled_sd = math.sqrt(
        ((len(x) - 1) * x.var(ddof=1) + (len(y) - 1) * y.var(ddof=1))
        / (len(x) + len(y) - 2)
    )
    return float((x.mean() - y.mean()) / pooled_sd) if pooled_sd > 0 else None


def holm(
    p_values: Sequence[float], alpha: float = 0.05
) -> tuple[list[float], list[bool]]:
    """Holm-Bonferroni step-down adjustment (controls the family-wise error rate).

    Returns:
        The adjusted p-values (in input order, capped at 1, monotone in the sorted
        order) and whether each hypothesis is rejected at ``alpha``.
    """
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted, [p <= alpha for p in adjusted]


def ols(y: FloatArray, x: FloatArray) -> JSON:
    """Least-squares fit of ``y = b0 + x @ b`` with R^2 and standard errors.

    Args:
        y: Response, shape ``(n,)``.
        x: Predictors, shape ``(n, k)``; an intercept column is added here.
    """
    import numpy as np

    n, k = x.shape
    if n <= k + 1:
        raise ToolError(f"OLS needs more rows ({n}) than parameters ({k + 1}).")
    design = np.column_stack([np.ones(n), x])
    beta, *_ = np.linalg.lstsq(design, y, rcond=None)
    residuals = y - design @ beta
    ss_res = float(residuals @ residuals)
    ss_tot = float(((y - y.mean()) ** 2).sum())
    sigma2 = ss_res / (n - k - 1)
    std_errors = np.sqrt(np.diag(sigma2 * np.linalg.inv(design.T @ design)))
    r2 = 1.0 - ss_res / ss_tot
    return {
        "n": n,
        "beta": [float(b) for b in beta],
        "std_errors": [float(s) for s in std_errors],
        "r2": r2,
        "adj_r2": 1.0 - (1.0 - r2) * (n - 1) / (n - k - 1),
        "rmse": math.sqrt(ss_res / n),
    }


def nearest_centroid(
    df: pd.DataFrame,
    features: Sequence[str],
    target: str,
    *,
    test_fraction: float,
    seed: int,
) -> JSON:
    """Train and score a nearest-centroid classifier on standardised features.

    The split is stratified by ``target`` and seeded, so it is the same every run;
    features are standardised with the training rows' mean and std only, so the test
    rows leak nothing into the model.
    """
    import numpy as np

    data = df[[*features, target]].dropna()
    rng = np.random.default_rng(seed)
    test_mask = np.zeros(len(data), dtype=bool)
    labels = data[target].to_numpy()
    classes = sorted({str(v) for v in labels})
    for cls in classes:
        members = np.flatnonzero(labels == cls)
        n_test = round(len(members) * test_fraction)
        test_mask[rng.permutation(members)[:n_test]] = True
    values = data[list(features)].to_numpy(dtype=np.float64)
    mean = values[~test_mask].mean(axis=0)
    std = values[~test_mask].std(axis=0, ddof=0)
    scaled = (values - mean) / std
    centroids = np.stack(
        [scaled[~test_mask & (labels == c)].mean(axis=0) for c in classes]
    )
    distances = ((scaled[test_mask][:, None, :] - centroids[None, :, :]) ** 2).sum(
        axis=2
    )
    predicted = [classes[i] for i in distances.argmin(axis=1)]
    truth = [str(v) for v in labels[test_mask]]
    confusion = {t: {p: 0 for p in classes} for t in classes}
    for t, p in zip(truth, predicted, strict=True):
        confusion[t][p] += 1
    correct = sum(t == p for t, p in zip(truth, predicted, strict=True))
    return {
        "features": list(features),
        "classes": classes,
        "n_train": int((~test_mask).sum()),
        "n_test": int(test_mask.sum()),
        "accuracy": _num(correct / len(truth)),
        "confusion": confusion,
        "centroids": {
            c: {
                f: _num(v * s + m)
                for f, v, s, m in zip(features, row, std, mean, strict=True)
            }
            for c, row in zip(classes, centroids, strict=True)
        },
    }
