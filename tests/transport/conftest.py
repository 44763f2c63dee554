"""Fixtures for transport tests: unique topic names, buses that are always closed."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from coorp.transport import Bus, Reach, iceoryx2_available

needs_iceoryx2 = pytest.mark.skipif(
    not iceoryx2_available(), reason="iceoryx2 not installed (pip install 'coorp[transport]')"
)


@pytest.fixture
def name() -> str:
    """A topic name no other test (or earlier run) uses."""
    return f"test/{uuid.uuid4().hex[:12]}"


@pytest.fixture
def local_bus() -> Iterator[Bus]:
    """A bus that reaches only its own process."""
    with Bus("test-local", reach=Reach.PROCESS) as bus:
        yield bus


@pytest.fixture
def shm_pair() -> Iterator[tuple[Bus, Bus]]:
    """Two buses in this process that can only meet through iceoryx2 shared memory."""
    if not iceoryx2_available():
        pytest.skip("iceoryx2 not installed (pip install 'coorp[transport]')")
    a = Bus("test-a", reach=Reach.MACHINE)
    b = Bus("test-b", reach=Reach.MACHINE)
    try:
        yield a, b
    finally:
        b.close()
        a.close()
