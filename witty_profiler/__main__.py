import sys

from witty_profiler.cli import main

sys.exit(main())
