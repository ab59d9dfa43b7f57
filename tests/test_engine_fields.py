"""The kinds of object the engine's own objects hold (nanoparallel/grading/engine_fields.py): another
library's object in a field is found, by its type, wherever it came from; data and a fresh object of
the engine's own kind are not. No process is started."""
from __future__ import annotations

import collections
import functools
import threading
import types
import unittest.mock

import pytest

from nanoparallel.grading.engine_fields import EngineFields, is_engine_object
from nanoparallel.runtime.board import StatusBoard
from nanoparallel.runtime.cluster import Cluster, RunResult
from nanoparallel.runtime.trace import Trace


@pytest.fixture
def cluster():
    made = Cluster(world_size=2)  # no rank starts before the first run
    yield made
    made.close()


def test_another_librarys_object_in_a_field_is_found_and_named(cluster):
    fields = EngineFields()
    fields.record(cluster, "cluster")
    assert fields.changes() == []
    lock = cluster._lock
    for stand_in in (types.SimpleNamespace(acquire=lock.acquire, release=functools.partial(list, ())),
                     unittest.mock.Mock(), functools.partial(print)):
        cluster._lock = stand_in
        (found,) = fields.changes()
        assert "cluster._lock" in found and type(stand_in).__qualname__ in found
    cluster._lock = lock
    assert fields.changes() == []


def test_objects_reached_through_fields_and_containers_are_recorded(cluster):
    fields = EngineFields()
    result = RunResult([1, 2], Trace([], 2), 0.5)
    fields.record({"runs": [result], "cluster": cluster}, "ns")
    cluster._board._slots = types.SimpleNamespace()
    result.trace.events = types.SimpleNamespace()
    found = " | ".join(fields.changes())
    assert "ns['cluster']._board._slots" in found and "ns['runs'][0].trace.events" in found


def test_plain_data_and_fresh_containers_are_not_changes(cluster):
    fields = EngineFields()
    fields.record(cluster, "cluster")
    finalizer, closed, workers = cluster._finalizer, cluster._closed, cluster._workers
    cluster.timeout = 30                    # a float the engine set, now an int
    cluster._workers = []                   # a fresh list, as the engine may make
    cluster._finalizer = None               # plain data: the engine's own call on it would fail
    del cluster._closed                     # so would its use of a field taken away
    assert fields.changes() == []
    cluster._finalizer, cluster._closed, cluster._workers = finalizer, closed, workers


def test_an_object_of_the_same_kind_is_still_another_object(cluster):
    """A fresh lock does what a lock does, but another status board or finalizer can call something
    else: the engine fills such fields once, so any other object is a change."""
    fields = EngineFields()
    fields.record(cluster, "cluster")
    board, lock = cluster._board, cluster._lock
    cluster._board, cluster._lock = StatusBoard(4), threading.Lock()
    found = " | ".join(fields.changes())
    assert "cluster._board holds another nanoparallel.runtime.board.StatusBoard" in found and "cluster._lock" in found
    cluster._workers = collections.deque()  # a container of another kind
    assert "cluster._workers holds a collections.deque where the engine put a builtins.list" in " | ".join(fields.changes())
    cluster._board, cluster._lock = board, lock


def test_plain_data_replaced_by_an_object_is_a_change(cluster):
    fields = EngineFields()
    fields.record(cluster, "cluster")
    stall = cluster.stall_timeout
    cluster.timeout, cluster.stall_timeout = types.SimpleNamespace(), functools.partial(print)  # a float, and None
    found = " | ".join(fields.changes())
    assert "cluster.timeout" in found and "cluster.stall_timeout" in found
    cluster.stall_timeout = stall


def test_the_first_record_is_kept(cluster):
    """A later record (a later locked cell reaching the same object) must not learn a
    replacement made in between as the engine's own."""
    fields = EngineFields()
    fields.record(cluster, "cluster")
    cluster._lock = types.SimpleNamespace()
    fields.record([cluster], "later")
    assert [c for c in fields.changes() if "cluster._lock" in c]


def test_only_the_engines_classes_count():
    assert is_engine_object(Trace([], 1)) and not is_engine_object(threading.Lock())
    assert not is_engine_object(Trace) and not is_engine_object(types.SimpleNamespace())
    fields = EngineFields()
    fields.record(types.SimpleNamespace(lock=threading.Lock()), "namespace")
    assert len(fields) == 0
