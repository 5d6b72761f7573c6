"""`python -m poolD` is the `poold` command."""

import sys

from poolD.cli import main

sys.exit(main())
