"""nbgrader configuration for the course (instructors: run nbgrader from this folder, or use make).

Source notebooks live in ../solutions and the generated student notebooks in ../course; both
are committed. Submissions, autograded copies, feedback and the gradebook stay here, ignored by git.
"""
import os

c = get_config()  # noqa: F821 (provided by nbgrader)

here = os.path.dirname(os.path.abspath(__file__))
c.CourseDirectory.course_id = "nanoparallel"
c.CourseDirectory.root = here
c.CourseDirectory.source_directory = "../solutions"
c.CourseDirectory.release_directory = "../course"
c.CourseDirectory.submitted_directory = "submitted"
c.CourseDirectory.autograded_directory = "autograded"
c.CourseDirectory.feedback_directory = "feedback"
c.CourseDirectory.db_url = "sqlite:///" + os.path.join(here, "gradebook.db")

c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
# A deadlocking submission is stopped by the cluster (10 s deadline) well before this.
c.ExecutePreprocessor.timeout = 60
# Backstop only: the engine keeps its workers off stderr, and any stderr scores a cell 0.
c.IgnorePattern.enabled = True
c.IgnorePattern.pattern = r".*(FutureWarning|DeprecationWarning).*"

# Grading integrity: run every submission with the guard (see guarded_execute.py and docs/grading.md).
import sys  # noqa: E402

sys.path.insert(0, here)
from guarded_execute import GuardedExecute, WitnessedScores  # noqa: E402
from nbgrader.converters.autograde import Autograde  # noqa: E402
from nbgrader.preprocessors import Execute, SaveAutoGrades  # noqa: E402

# The kernel runs in a sandbox, and a graded cell's score comes from the witness alone.
_OURS = {Execute: GuardedExecute, SaveAutoGrades: WitnessedScores}
c.Autograde.autograde_preprocessors = [_OURS.get(p, p) for p in Autograde().autograde_preprocessors]
c.GuardedExecute.timeout = 60
