"""``python -m voice``: see :mod:`voice.cli`."""

import sys

from voice.cli import main

sys.exit(main())
