import pytest

from nanoparallel import Cluster


@pytest.fixture(scope="session")
def cluster():
    """One 4-rank cluster for the engine tests; tests that need another size call resize()."""
    with Cluster(world_size=4, timeout=5.0) as c:
        yield c


@pytest.fixture
def cluster4(cluster):
    cluster.resize(4) if cluster.world_size != 4 else None
    return cluster
