"""Tampering attempts on 02_data_parallel (see 00_welcome.py for the format): an operator's kernel registered
with torch.library beside right answers (tests/operator_override.py)."""
from operator_override import case

TAMPERING = {"torch_library_override": case("02_data_parallel")}
