"""Privacy building blocks: secure randomness, noise, mechanisms and the budget ledger.

Nothing here knows about forests, records or Redis; every other layer draws its
noise and charges its budget through this package.
"""

from streamdp.privacy.mechanisms import (
    NearlyExactWarning,
    NotPrivateWarning,
    SecureRandom,
    bernoulli_sample,
    exponential_mechanism,
    geometric_noise,
    geometric_pmf,
    kanon_check,
    kanon_delta,
    kanon_min_epsilon,
    laplace_granularity,
    laplace_noise,
)

__all__ = [
    "SecureRandom",
    "NotPrivateWarning",
    "NearlyExactWarning",
    "geometric_noise",
    "geometric_pmf",
    "laplace_noise",
    "laplace_granularity",
    "exponential_mechanism",
    "bernoulli_sample",
    "kanon_delta",
    "kanon_min_epsilon",
    "kanon_check",
]
