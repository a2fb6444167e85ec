from witty_profiler.cli import entry

entry()
