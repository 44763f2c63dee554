"""How the parameter server folds workers' updates into the model: one place for the
simulated channel (:mod:`coorp.learn._network`) and the real runtime
(:mod:`coorp.learn._runtime`), so both run the same arithmetic in the same order.

* **BSP/SSP** (:func:`merge_mean_delta`): the current model plus the mean of the
  workers' deltas (new − the model they started from), summed in worker order (float
  sums are order-dependent; a fixed order makes the result bit-identical).
* **ASP** (:func:`merge_async`): the current model plus one worker's delta divided by
  the number of workers, applied when its update arrives.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["merge_async", "merge_mean_delta"]


def merge_mean_delta(
    current: np.ndarray, base: np.ndarray, news: Sequence[np.ndarray]
) -> np.ndarray:
    """``current + mean(new_i - base)``, summed in the order of ``news``."""
    acc = np.zeros_like(base)
    for new in news:  # worker order: a fixed summation order
        acc += new - base
    return (current + acc / np.float32(len(news))).astype(np.float32)


def merge_async(
    current: np.ndarray, base: np.ndarray, new: np.ndarray, n_workers: int
) -> np.ndarray:
    """``current + (new - base) / n_workers``: one worker's update applied alone."""
    return (current + (new - base) / np.float32(n_workers)).astype(np.float32)
