"""The grading guard's engine pieces, without nbgrader: where code comes from, the ranks' check.

The whole path (a kernel, MAC'd records, nbgrader's scores) is tested by tests/test_integrity.py and
tests/test_tampering.py."""
from __future__ import annotations

import os
import types

import pytest
import torch

from nanoparallel import Cluster, RankError
from nanoparallel.grading import rank_guard
from nanoparallel.grading.provenance import Provenance, code_digest


def test_library_objects_are_not_notebook_made():
    prov = Provenance()
    import collections
    import dataclasses

    from nanoparallel.grading import checks
    from nanoparallel.lessons import cost
    for obj in (torch.allclose, torch.Tensor, torch.nn.Linear(2, 2), checks.assert_close, cost.LINKS["nvlink"],
                collections.OrderedDict, dataclasses.dataclass, os.path.join, print, types):
        assert not prov.is_notebook(obj), obj


def test_code_typed_or_generated_by_a_notebook_is_notebook_made():
    user_ns: dict = {}
    exec(compile("def f():\n    return 1\nclass C:\n    def __eq__(self, other):\n        return True\n",
                 "/tmp/ipykernel_0/cell.py", "exec"), user_ns)
    prov = Provenance(user_ns=user_ns)
    assert prov.is_notebook(user_ns["f"]) and prov.is_notebook(user_ns["C"]) and prov.is_notebook(user_ns["C"]())
    # The same code is the course's when its digest is the course's.
    trusted = Provenance(user_ns=user_ns, trusted_code=frozenset({code_digest(user_ns["f"].__code__)}))
    assert not trusted.is_notebook(user_ns["f"])
    # Code compiled at run time, remembered by the audit hook, stays notebook-made whatever it claims.
    fake = types.FunctionType(compile("lambda: None", torch.__file__, "eval").co_consts[0], torch.__dict__)
    assert not Provenance().is_notebook(fake)
    assert Provenance(notebook_code={id(fake.__code__)}).is_notebook(fake)


@pytest.fixture
def guarded_cluster(monkeypatch):
    monkeypatch.setenv(rank_guard.ENV, "1")
    with Cluster(world_size=2) as cluster:
        yield cluster


def _patches_torch():
    torch.allclose = lambda *args, **kwargs: True
    return 1


def _patches_torch_with_a_library_object():
    import unittest.mock
    torch.allclose = unittest.mock.MagicMock(return_value=True)
    return 1


def _reads_frames():
    import inspect
    return inspect.currentframe() is not None


def _honest():
    import torch.distributed as dist
    t = torch.ones(3) * (dist.get_rank() + 1)
    dist.all_reduce(t)
    return t.sum().item()


def test_ranks_stop_when_notebook_code_patches_torch_or_reads_frames(guarded_cluster):
    assert guarded_cluster.run(_honest) == [9.0, 9.0]
    for fn, what in ((_patches_torch, "torch.allclose was replaced"),
                     (_patches_torch_with_a_library_object, "torch.allclose was replaced"),
                     (_reads_frames, "sys._getframe")):
        with pytest.raises(RankError) as caught:
            guarded_cluster.run(fn)
        assert "grader's guard" in str(caught.value) and what in str(caught.value)
        assert guarded_cluster.run(_honest) == [9.0, 9.0]  # fresh ranks, untouched


def test_package_folders_are_the_site_packages_that_pth_files_add(tmp_path, monkeypatch):
    """Only folders named site-packages or dist-packages, listed in a .pth file of a site folder
    (absolute or relative), count; comments, import lines and other folders (a course's root) do not."""
    import site
    from nanoparallel.grading import provenance
    site_dir, other, dist, root = (tmp_path / n for n in ("site", "env/lib/site-packages", "deb/dist-packages", "course"))
    for folder in (site_dir, other, dist, root):
        folder.mkdir(parents=True)
    (site_dir / "a.pth").write_text(f"# {other}\nimport os; os.getcwd()\n{other}\n../deb/dist-packages\n{root}\n"
                                    f"{tmp_path / 'missing' / 'site-packages'}\n")
    (site_dir / "b.txt").write_text(f"{root / 'site-packages'}\n")
    monkeypatch.setattr(site, "getsitepackages", lambda: [str(site_dir)])
    assert provenance.package_folders() == sorted([os.path.realpath(other), os.path.realpath(dist)])


def test_an_engine_spec_changed_in_place_changes_its_shape():
    """A locked cell's NEOX_20B and planner.MODELS are frozen dataclasses, which object.__setattr__
    still changes: the summary the guard compares must see it."""
    from nanoparallel.grading.guard import _shape
    from nanoparallel.lessons.planner import ModelSpec
    spec = ModelSpec("tiny", n_layer=4, hidden=8, heads=2, vocab=10, seq=4)
    models = {"tiny": spec}
    before = _shape(models)
    assert before is not None and _shape(ModelSpec("tiny", 4, 8, 2, 10, 4)) == _shape(spec)
    object.__setattr__(spec, "n_layer", 0)
    assert _shape(models) != before
