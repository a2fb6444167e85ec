import sys

from witty_profiler.mcp_server.cli import main

sys.exit(main())
