"""Collective-communication cells (PARAM's comms.py, nccl-tests): one collective over a
sweep of message sizes among a cell's processes. ``python -m dlbench.comms``."""
