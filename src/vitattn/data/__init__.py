"""CIFAR-10 as in-memory uint8 tensors with augmentation on the device."""
