"""MXNet runner: ``python -m dlbench.mxnet --model resnet50 --batch_size 64 ...``.

Importing this package does not import mxnet, so that the workflow driver and the
"mxnet is missing" path work in any environment.
"""
