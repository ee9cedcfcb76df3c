"""PyTorch runner: ``python -m dlbench.pytorch --model resnet50 --batch_size 64 ...``."""
