"""The PyTorchTrainingJob API: generated types, the model codec, constants. Pure: no I/O."""
