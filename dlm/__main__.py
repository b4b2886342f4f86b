import sys

from dlm.cli import main

sys.exit(main())
