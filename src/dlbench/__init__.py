"""dlbench: benchmark deep-learning frameworks over a grid of cells."""

__version__ = "0.1.0"
