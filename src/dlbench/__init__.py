"""dlbench: benchmark deep-learning frameworks over a grid of cells."""

# Imported first so that it reads the process's CPU set before any framework binds the
# main thread to one CPU (see cpu.PROCESS_AFFINITY).
from dlbench import cpu as _cpu  # noqa: F401

__version__ = "0.1.0"
