"""vitattn: Vision Transformers on CIFAR-10 with interchangeable attention mechanisms."""

__version__ = "0.1.0"
