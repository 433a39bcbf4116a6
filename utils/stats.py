"""Small statistics on timing samples (pure Python, testable without a GPU)."""
from __future__ import annotations

import dataclasses
import statistics


def percentile(samples, q: float) -> float:
    """Linear-interpolated percentile, q in [0, 100]."""
    xs = sorted(samples)
    if not xs:
        raise ValueError("no samples")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile q must be within [0, 100], got {q}")
    pos = (len(xs) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


@dataclasses.dataclass
class Timing:
    """Median time of repeated runs in milliseconds, with the 10th/90th percentiles as the spread."""
    ms: float
    p10: float
    p90: float
    n: int

    @property
    def spread(self) -> float:
        """(p90 - p10) / median: the relative width of the middle 80% of runs."""
        return (self.p90 - self.p10) / self.ms if self.ms > 0 else 0.0

    @classmethod
    def of(cls, samples_ms) -> "Timing":
        xs = list(samples_ms)
        if not xs:
            raise ValueError("no timing samples")
        if any(x < 0 for x in xs):
            raise ValueError("negative elapsed time: events recorded out of order")
        return cls(statistics.median(xs), percentile(xs, 10), percentile(xs, 90), len(xs))


def gbps(nbytes: float, ms: float) -> float:
    """Bytes moved over time, in GB/s (1e9 bytes per second)."""
    return nbytes / (ms * 1e-3) / 1e9


def tflops(flops: float, ms: float) -> float:
    return flops / (ms * 1e-3) / 1e12


def geomean(xs) -> float:
    xs = list(xs)
    if not xs or any(x <= 0 for x in xs):
        raise ValueError("geometric mean needs positive values")
    return statistics.geometric_mean(xs)
