"""``python -m vitattn.check`` = ``vitattn-check``."""

from vitattn.check.app import main

main()
