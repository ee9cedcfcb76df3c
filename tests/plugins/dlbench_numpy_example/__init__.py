"""A whole dlbench framework in one folder, for tests: a NumPy multi-layer perceptron.

It proves the framework plug-in point: registered only through its entry point
(``dlbench_numpy_example-0.1.dist-info/entry_points.txt``, found when this folder is on
PYTHONPATH), it runs cells through the real workflow with no edit to dlbench."""
