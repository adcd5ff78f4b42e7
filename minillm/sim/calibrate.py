"""Fitting the simulator's cost model to a Trace of the real engine.

`calibrate(trace)` reads every step's features (prefill tokens, decode rows, attention
pairs — `sim_runner.step_features`) and measured duration, and solves for the four
costs of `CostModel` by least squares with every cost kept >= 0 (a negative cost per
token would be nonsense). `fit_quality` says how well the fitted model explains the
steps (R², mean relative error); steps far off the fit (one-off stalls of a busy
machine) can be dropped as outliers first.
"""

from __future__ import annotations

import itertools

import numpy as np

from minillm.engine.trace import Trace
from minillm.sim.sim_runner import FEATURES, CostModel, step_features


def trace_design(trace: Trace, skip_steps: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Features X [S, 4] and measured durations y [S] of a Trace's steps."""
    steps = trace.steps[skip_steps:]
    X = np.array([step_features(s) for s in steps], dtype=float).reshape(-1, len(FEATURES))
    y = np.array([s.duration for s in steps], dtype=float)
    return X, y


def nonnegative_lstsq(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """argmin ||X c − y||² subject to c >= 0, for a handful of columns.

    The constrained optimum is an ordinary least-squares fit on *some* subset of the
    columns (the others pinned at 0). With 4 columns there are only 16 subsets, so we
    try them all and keep the best fit whose coefficients are all >= 0 — exact, and
    much shorter than the classic active-set algorithm (Lawson–Hanson).
    """
    n_features = X.shape[1]
    scale = np.abs(X).max(axis=0)
    scale[scale == 0] = 1.0
    Xs = X / scale                                   # [S, F], columns of similar size
    best, best_err = np.zeros(n_features), float(np.sum(y ** 2))
    for k in range(1, n_features + 1):
        for cols in itertools.combinations(range(n_features), k):
            coef, *_ = np.linalg.lstsq(Xs[:, cols], y, rcond=None)
            if np.any(coef < 0):
                continue
            full = np.zeros(n_features)
            full[list(cols)] = coef
            err = float(np.sum((Xs @ full - y) ** 2))
            if err < best_err - 1e-15 * max(best_err, 1.0):
                best, best_err = full, err
    return best / scale


def fit_quality(cost_model: CostModel, trace: Trace, skip_steps: int = 0) -> dict:
    """How well `cost_model` predicts a Trace's step durations.

    r2: 1 − residual variance / variance of the durations (1 = perfect);
    mean_rel_error: mean of |predicted − measured| / measured over the steps.
    """
    X, y = trace_design(trace, skip_steps)
    pred = X @ cost_model.coefficients                        # [S]
    ss_res = float(np.sum((pred - y) ** 2))
    ss_tot = float(np.sum((y - y.mean()) ** 2)) if len(y) else 0.0
    positive = y > 0
    rel = np.abs(pred[positive] - y[positive]) / y[positive]
    return {"r2": 1.0 - ss_res / ss_tot if ss_tot > 0 else float("nan"),
            "mean_rel_error": float(rel.mean()) if rel.size else float("nan"),
            "num_steps": int(len(y))}


def calibrate(trace: Trace, skip_steps: int = 0, outlier_factor: float | None = 5.0,
              max_rounds: int = 5) -> CostModel:
    """Fit a CostModel to a Trace's measured step durations (non-negative least squares).

    `skip_steps` drops the first steps (warm-up on a real machine). On a shared CPU a
    few steps take many times longer than they should (another program ran); least
    squares would bend the whole line towards them. So after each fit, steps whose
    residual exceeds `outlier_factor` × the median absolute residual are set aside and
    the fit is redone, until nothing changes (at most `max_rounds`; None: no
    outlier removal). The result's `.fit` holds `fit_quality` on the kept steps plus
    `num_outliers`.

    Give it a varied trace — prefills and decodes of different sizes — or some costs
    cannot be told apart (with every step a 16-row decode, overhead and per-row cost
    are one number).
    """
    X, y = trace_design(trace, skip_steps)
    if len(y) == 0:
        raise ValueError("the trace has no steps to calibrate on")
    keep = np.ones(len(y), dtype=bool)                   # [S] steps used in the fit
    for _ in range(max_rounds):
        coef = nonnegative_lstsq(X[keep], y[keep])
        if outlier_factor is None:
            break
        residual = np.abs(X @ coef - y)                  # [S]
        floor = 1e-9 * float(np.median(y))               # an exact fit has residual ~0
        new_keep = residual <= outlier_factor * max(float(np.median(residual[keep])), floor)
        if (new_keep == keep).all() or new_keep.sum() < len(FEATURES):
            break
        keep = new_keep
    coef = nonnegative_lstsq(X[keep], y[keep])           # final fit on the kept steps
    model = CostModel(*(float(c) for c in coef))
    kept_steps = [s for s, k in zip(trace.steps[skip_steps:], keep) if k]
    kept = Trace(config=trace.config, steps=kept_steps)
    model.fit = {**fit_quality(model, kept), "num_outliers": int((~keep).sum())}
    return model
