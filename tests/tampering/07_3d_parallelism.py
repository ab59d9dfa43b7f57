"""Tampering attempts on 07_3d_parallelism (see 00_welcome.py for the format): an operator's kernel registered
with torch.library beside right answers (tests/operator_override.py), and the engine's functions
replaced by another library's objects beside right answers (tests/library_objects.py)."""
import library_objects
import operator_override

TAMPERING = {"torch_library_override": operator_override.case("07_3d_parallelism"),
             "library_objects": library_objects.case("07_3d_parallelism")}
