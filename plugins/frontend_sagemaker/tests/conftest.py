"""The SageMaker frontend's tests import their helpers from ``sagemaker_testing`` (this
folder, put on the path: the tests run in importlib mode)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(scope="session")
def http() -> Iterator[requests.Session]:
    """One HTTP session for a test session."""
    with requests.Session() as session:
        yield session
