"""Collecting a cluster through the launchers it already has (Slurm, OpenSSH, kubectl): one graph file
per host in a directory, with a manifest of what happened on each host. See cluster.fanout."""
