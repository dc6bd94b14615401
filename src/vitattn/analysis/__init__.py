"""Reading run outputs (TensorBoard event files, ``metrics.json``, attention maps) for figures
and tables, and summarizing a sweep when it ends (:mod:`vitattn.analysis.sweep_summary`)."""
