"""Which mutants may share a graded submission (tests/mutant_packing.py)."""
from mutant_packing import compatible, pack, reach

CELLS = [
    ("setup", False, "%matplotlib inline\nimport torch\ndef run_twice(fn):\n    return fn(), fn()\n"),
    ("square", True, "def square(x):\n    return x * x\n"),
    ("square_tests", False, "assert square(3) == 9\n"),
    ("cube", True, "def cube(x):\n    return x * square(x)\n"),
    ("cube_tests", False, "assert cube(2) == 8\n"),
    (None, False, "table = [square(i) for i in range(4)]\ndef show():\n    return table\n"),
    ("total", True, "def total(xs):\n    return sum(xs)\n"),
    ("total_tests", False, "assert total(show()) == 14\n"),
    ("name", True, "def name():\n    return 'x'\n"),
    ("name_tests", False, "assert run_twice(name) == ('x', 'x')\n"),
]


def test_an_exercise_reaches_the_answers_its_answer_or_checks_read_directly_or_through_other_cells():
    reaches = reach(CELLS)
    assert reaches["cube"] == {"square"}                 # its answer calls square
    assert reaches["total"] == {"square"}                # its checks read a demonstration made by square
    assert reaches["square"] == set() and reaches["name"] == set()  # a set-up helper reads no answer


def test_mutants_share_a_submission_only_when_neither_reaches_the_other():
    reaches = reach(CELLS)
    assert compatible({"square"}, {"name"}, reaches)
    assert not compatible({"square"}, {"cube"}, reaches) and not compatible({"cube"}, {"square"}, reaches)
    assert not compatible({"total"}, {"square", "name"}, reaches)
    assert not compatible({"name"}, {"name"}, reaches)  # one cell cannot hold two wrong answers
    mutants = {"a": {"square"}, "b": {"cube"}, "c": {"name"}, "d": {"total"}, "e": {"cube", "name"}}
    groups = pack(mutants, reaches)
    assert sorted(sum(groups, [])) == sorted(mutants)
    for group in groups:
        for i, x in enumerate(group):
            assert all(compatible(mutants[x], mutants[y], reaches) for y in group[i + 1:]), groups
    assert len(groups) < len(mutants)
