"""``vitattn-bench``: measuring attention mechanisms side by side.

* :mod:`~vitattn.bench.scaling`: time and memory against sequence length (``mode=scaling``);
* :mod:`~vitattn.bench.approx`: error of each approximation against softmax (``mode=approx``);
* :mod:`~vitattn.bench.spectrum`: singular values of trained attention (``mode=spectrum``);
* :mod:`~vitattn.bench.timing`, :mod:`~vitattn.bench.memory`: the measurements;
* :mod:`~vitattn.bench.app`: the Hydra entry point (``configs/bench.yaml``).
"""
