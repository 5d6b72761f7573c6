"""What every command-line entry point shares: user errors become one line, not a traceback."""

from __future__ import annotations

import sys
from collections.abc import Callable

from common.config import ConfigError

EXIT_USER_ERROR = 2


def run_main(prog: str, main: Callable[[], int]) -> int:
    """Run `main`; a ConfigError is printed as `prog: error: ...` and exits 2."""
    try:
        return main()
    except ConfigError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        return 130
