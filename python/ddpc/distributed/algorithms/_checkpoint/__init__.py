"""Activation checkpointing by wrapping modules, at PyTorch's path
``torch.distributed.algorithms._checkpoint.checkpoint_wrapper``."""
