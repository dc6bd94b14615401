"""Small helpers that Lightning, Hydra and torch do not already provide."""
