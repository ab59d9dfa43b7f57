"""A pytest plugin for the suite's nbval run (tests/background.py): nbval's kernel is reached over
ipc sockets (autograder/kernel_sockets.py), as every kernel the suite starts beside other notebooks'
ranks is. Nothing else differs from a CI user's nbval run."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "autograder"))

import nbval.kernel  # noqa: E402
from kernel_sockets import IpcKernelManager  # noqa: E402

nbval.kernel.KernelManager = IpcKernelManager
