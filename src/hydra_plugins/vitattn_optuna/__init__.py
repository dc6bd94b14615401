"""vitattn's Hydra plugins (Hydra finds plugins in the ``hydra_plugins`` namespace only)."""
