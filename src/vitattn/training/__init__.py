"""Fitting a model: the trainer and its callbacks, the TensorBoard logger, the hyper-parameters a
run records, and Lightning's output kept to what a reader needs."""
