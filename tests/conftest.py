import warnings

import matplotlib.pyplot as plt
import pytest

from nanoparallel import Cluster


@pytest.fixture(scope="session")
def cluster():
    """One 4-rank cluster for the engine tests; tests that need another size call resize().
    Deadlocks wait for the whole deadline here (no stall detection), whatever the environment."""
    with Cluster(world_size=4, timeout=5.0, stall_timeout=0) as c:
        yield c


@pytest.fixture
def cluster4(cluster):
    cluster.resize(4) if cluster.world_size != 4 else None
    return cluster


@pytest.fixture
def quiet_pictures(capsys):
    """For picture and widget tests: no pyplot figure left open, nothing on stderr, no warning."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    assert plt.get_fignums() == []
    assert capsys.readouterr().err == ""
    assert [str(w.message) for w in caught] == []
