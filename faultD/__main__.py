"""`python -m faultD` is `faultd`."""

import sys

from faultD.cli import main

sys.exit(main())
