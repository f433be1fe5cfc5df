"""Shared fixtures of the Python tests: the repository's tests/python directory on sys.path
(for reference.py) and a seeded random generator."""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
# A call uses the threads it is given (not fewer for small work), so the tests that compare
# thread counts on small problems really run them; attn reads this once, at its first call.
os.environ.setdefault("ATTN_THREADS_BY_WORK", "0")


@pytest.fixture
def rng():
    return np.random.default_rng(20261201)
