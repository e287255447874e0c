"""``python -m refimpl``: the same as the ``refimpl`` command."""

import sys

from refimpl.cli import main

if __name__ == "__main__":
    sys.exit(main())
