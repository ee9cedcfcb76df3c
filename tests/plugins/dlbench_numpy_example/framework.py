"""What the driver knows of the NumPy framework (imports no NumPy)."""

from dlbench.frameworks import Framework
from dlbench.models import ModelSpec

FRAMEWORK = Framework(
    name="numpy",
    runner="dlbench_numpy_example",
    precisions=("float32", "float64"),
    new_models=(ModelSpec("numpy_mlp", (64,), 10, "features",
                          {"numpy": "dlbench_numpy_example.runner:build"},
                          {"hidden": 128}, "Two-layer perceptron in NumPy"),),
    description="NumPy (a test framework)",
)
