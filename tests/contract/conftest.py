from __future__ import annotations

import hashlib
from collections.abc import Iterator

import pytest

from tests.contract.harnesses import HARNESSES, Harness, harness_for


@pytest.fixture(scope="module", params=HARNESSES)
def harness(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Harness]:
    tmp = tmp_path_factory.mktemp(f"contract-{request.param}")
    with (
        pytest.MonkeyPatch.context() as monkeypatch,
        harness_for(request.param, tmp, monkeypatch) as made,
    ):
        yield made


@pytest.fixture
def cluster(request: pytest.FixtureRequest) -> str:
    """A cluster name of the test's own (the backend is shared by the module's tests)."""
    digest = hashlib.sha256(request.node.originalname.encode()).hexdigest()[:8]
    return f"c-{digest}"
