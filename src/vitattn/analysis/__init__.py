"""Reading run outputs (TensorBoard event files, ``metrics.json``) for figures and tables."""
