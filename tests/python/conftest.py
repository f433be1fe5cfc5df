"""Shared fixtures of the Python tests: the repository's tests/python directory on sys.path
(for reference.py) and a seeded random generator."""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))


@pytest.fixture
def rng():
    return np.random.default_rng(20261201)
