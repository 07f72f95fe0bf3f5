import sys

from timebox.cli import main

sys.exit(main())
