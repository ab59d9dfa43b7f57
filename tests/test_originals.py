"""The guard's originals (nanoparallel/grading/originals.py): a replacement is found by identity,
whoever made it; data may change; a module may gain names."""
from __future__ import annotations

import fractions
import functools
import io
import math
import sys
import types
import unittest.mock

import pytest
import torch

from nanoparallel.grading import checks
from nanoparallel.grading.originals import Originals, is_code, shadowed_method
from nanoparallel.runtime.trace import Trace


@pytest.fixture(scope="module")
def originals():
    return Originals()


def test_another_librarys_object_in_a_module_is_found(originals, monkeypatch):
    for module, name, replacement in ((math, "isclose", unittest.mock.MagicMock(return_value=True)),
                                      (torch, "allclose", unittest.mock.MagicMock(return_value=True)),
                                      (checks, "_compare", functools.partial(print, file=io.StringIO())),
                                      (checks, "assert_close", print)):
        assert originals.module_change(vars(module), name) is None
        monkeypatch.setattr(module, name, replacement)
        found = originals.module_change(vars(module), name)
        assert found and f"{module.__name__}.{name} was replaced" in found, found
        monkeypatch.undo()
    monkeypatch.delattr(math, "isclose")
    assert "math.isclose was removed" in originals.module_change(vars(math), "isclose")


def test_a_module_may_change_its_data_and_gain_names(originals, monkeypatch):
    monkeypatch.setattr(checks, "_some_cache", {}, raising=False)
    assert originals.module_change(vars(checks), "_some_cache") is None  # gained
    monkeypatch.setattr(math, "pi", 3.0)
    assert originals.module_change(vars(math), "pi") is None  # data
    assert originals.module_change({}, "anything") is None  # not a module's namespace


def test_methods_replaced_or_added_on_a_class_are_found(originals, monkeypatch):
    monkeypatch.setattr(Trace, "bytes_sent", unittest.mock.MagicMock(return_value=unittest.mock.ANY))
    assert "Trace.bytes_sent was replaced" in originals.class_change(Trace, "bytes_sent")
    # torch.Tensor inherits double() from its C base: a method set on Tensor hides it
    monkeypatch.setattr(torch.Tensor, "double", unittest.mock.MagicMock(), raising=False)
    assert "Tensor.double was added" in originals.class_change(torch.Tensor, "double")
    monkeypatch.undo()
    assert originals.class_change(Trace, "bytes_sent") is None
    assert originals.class_change(torch.Tensor, "double") is None

    class Later:  # a class made after the originals were taken: provenance's business
        def f(self):
            pass
    Later.f = print
    assert originals.class_change(Later, "f") is None


def test_a_function_changed_in_place_is_found(originals, monkeypatch):
    """The same object with other code or defaults: reassigned, or its keyword defaults edited in
    place (Python raises no audit event for that); a property's function too."""
    lenient = (lambda got, expected, where, rtol, atol: None).__code__
    kw = torch.testing.assert_close.__kwdefaults__
    changes = [
        lambda: monkeypatch.setattr(checks.assert_close, "__defaults__", ("result", 1e300, 1e300)),
        lambda: monkeypatch.setattr(checks._compare, "__code__", lenient),
        lambda: monkeypatch.setattr(torch.testing.assert_close, "__kwdefaults__", {}),
        lambda: monkeypatch.setitem(kw, "rtol", 1e300),
        lambda: monkeypatch.setattr(fractions.Fraction.numerator.fget, "__code__", (lambda self: 0).__code__),
    ]
    for fn, change in zip((checks.assert_close, checks._compare, torch.testing.assert_close,
                           torch.testing.assert_close, fractions.Fraction.numerator), changes):
        assert originals.function_change(fn) is None
        change()
        assert "was changed in place" in originals.function_change(fn)
        monkeypatch.undo()
        assert originals.function_change(fn) is None
    # and where the guard's walk asks, through a module or a class
    monkeypatch.setattr(checks.assert_close, "__defaults__", ("result", 1.0, 1.0))
    assert "was changed in place" in originals.module_change(vars(checks), "assert_close")
    monkeypatch.setattr(fractions.Fraction.numerator.fget, "__code__", (lambda self: 0).__code__)
    assert "was changed in place" in originals.class_change(fractions.Fraction, "numerator")


def test_an_objects_own_value_hiding_its_class_method_is_found():
    trace = Trace([], 2)
    trace.bytes_sent = unittest.mock.MagicMock()
    assert "Trace.bytes_sent" in shadowed_method(Trace, "bytes_sent", vars(trace)["bytes_sent"])
    trace.note = "data may sit beside methods"
    assert shadowed_method(Trace, "note", vars(trace)["note"]) is None
    assert shadowed_method(Trace, "events", print) is None  # no class attribute of that name hidden


def test_what_counts_as_code():
    assert all(map(is_code, (print, len, math.isclose, torch.allclose, Trace, Trace.bytes_sent,
                             unittest.mock.MagicMock(), functools.partial(print), property(len), types, sys)))
    assert not any(map(is_code, (1, "text", None, [print], {"f": print})))


def test_a_test_double_made_while_the_notebook_runs_is_a_lying_class():
    """Each MagicMock gets a class of its own, made by unittest.mock (loaded before any cell) while
    the notebook runs: its __eq__ can say True to anything. Classes that existed before do not
    count, nor do those of a library imported since (defined as it is imported)."""
    from nanoparallel.grading.guard import _lying_classes
    from nanoparallel.grading.provenance import Provenance
    import gc
    gc.collect()  # the mocks of the tests before this one, and their classes
    originals, loaded = Originals(), set(sys.modules)
    before = _lying_classes(Provenance(), originals, loaded)
    assert not any("made while the notebook ran" in f for f in before), before
    double = unittest.mock.MagicMock(spec=int)
    double.__eq__.return_value = True
    assert double == 1000 and isinstance(double, int)  # what it would do to a check
    found = _lying_classes(Provenance(), originals, loaded)
    assert any("unittest.mock.MagicMock, a class made while the notebook ran" in f for f in found), found
    # A double a library made and dropped (04 calls torch's schedule visualizer, which does) is
    # garbage in a reference cycle until a collection: not a finding.
    del double
    assert not any("made while the notebook ran" in f for f in _lying_classes(Provenance(), originals, loaded))
    assert not any("made while the notebook ran" in f for f in _lying_classes(Provenance(), originals, set()))


def test_a_lying_method_put_on_a_class_that_existed_is_found():
    """The scan skips what a class held before any cell ran when it cannot have changed since (a
    function, a C method); a method added later, and a partial changed in place, are still
    judged. Functions of this test file count as notebook code here."""
    from nanoparallel.grading.guard import _lying_classes
    from nanoparallel.grading.provenance import Provenance
    import operator

    class Plain:
        pass

    class WithPartial:
        __eq__ = functools.partial(operator.eq)

    originals, loaded = Originals(), set(sys.modules)
    assert not any("Plain" in f or "WithPartial" in f for f in _lying_classes(Provenance(), originals, loaded))
    Plain.__eq__ = lambda self, other: True
    WithPartial.__eq__.__setstate__((lambda *args: True, (), {}, None))
    found = _lying_classes(Provenance(), originals, loaded)
    assert any("class test_a_lying_method_put_on_a_class_that_existed_is_found.<locals>.Plain defines __eq__" in f
               for f in found), found
    assert any("WithPartial defines __eq__" in f for f in found), found
