"""The console side: the console scripts' shared ``main``, a config checked before anything runs,
and the command lines that continue a run (``docs/architecture.md``)."""
