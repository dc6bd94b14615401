"""What the tests share, one module a kind of thing:

- :mod:`~tests.support.presets`: the tiny settings, the overrides that plug a test's callback
  into a run, configs composed as the CLI composes them, tiny models;
- :mod:`~tests.support.runners`: the console scripts run as processes, ``vitattn-train``'s task
  in this process, and the checks of a refusal;
- :mod:`~tests.support.in_process`: a console script run in the test's own process;
- :mod:`~tests.support.faults`: callbacks that make a real run fail, stop or stall
  (``+callbacks.x._target_=tests.support.faults.SigtermAtStep``);
- :mod:`~tests.support.probes`: callbacks that record what a real run did;
- :mod:`~tests.support.tables`: the CSV files and Markdown tables a command writes, read back;
- :mod:`~tests.support.trees`: directory trees compared and copied;
- :mod:`~tests.support.workers`: which tests share a pytest-xdist worker, and in what order.

A run started as a process imports :mod:`~tests.support.faults` or :mod:`~tests.support.probes`
by name, so this package imports nothing itself.
"""
