"""``vitattn-bench``: measuring attention mechanisms side by side.

Imports go one way, from the entry point down to the measurements:

* :mod:`~vitattn.bench.app`: the Hydra entry point (``configs/bench.yaml``): settings, runner,
  writer;
* :mod:`~vitattn.bench.settings`: the typed settings (registered in Hydra's ConfigStore here, so
  that ``configs/bench.yaml`` composes wherever ``vitattn.bench`` is imported) and their checks;
* the runners, one per mode, computing rows without writing files:
  :mod:`~vitattn.bench.scaling` (``mode=scaling``), :mod:`~vitattn.bench.approx`
  (``mode=approx``), :mod:`~vitattn.bench.spectrum` (``mode=spectrum``) and
  :mod:`~vitattn.bench.train_speed` (``mode=train``, with :mod:`~vitattn.bench.references`);
* :mod:`~vitattn.bench.writers`: each mode's files, with :mod:`~vitattn.bench.plots`;
* what the runners use: :mod:`~vitattn.bench.kernels`, :mod:`~vitattn.bench.timing`,
  :mod:`~vitattn.bench.memory`, :mod:`~vitattn.bench.capture`,
  :mod:`~vitattn.bench.environment`.
"""

from vitattn.bench import settings as _settings  # noqa: F401  (registers the schema)
