"""Script-style entry points kept for compatibility with the original tool's commands."""
