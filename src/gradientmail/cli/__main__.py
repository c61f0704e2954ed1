"""``python -m gradientmail.cli``: the same as the ``gradientmail`` command."""

import sys

from gradientmail.cli import main

if __name__ == "__main__":
    sys.exit(main())
