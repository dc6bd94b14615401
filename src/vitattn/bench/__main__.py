"""``python -m vitattn.bench`` = ``vitattn-bench``."""

from vitattn.bench.app import main

main()
