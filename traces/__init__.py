"""Training traces read into the graph: PyTorch profiler (Kineto) and msprof-analyze outputs."""
