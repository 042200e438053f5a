"""`python -m bench`: run the benchmarks and write bench/RESULTS.md and bench/results.png (see bench/runner.py)."""

import sys

from bench.runner import main

sys.exit(main())
