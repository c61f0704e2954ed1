"""``python -m gradientmail``: the same as the ``gradientmail`` command."""

import sys

from gradientmail._cli import main

if __name__ == "__main__":
    sys.exit(main())
