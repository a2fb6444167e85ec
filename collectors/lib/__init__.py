"""What the collectors stand on, apart from the collectors themselves (one module per observation domain, in
the folder above, each registered with `collectors.base.register`): parsers of /proc and /sys files and of
vendor tools' output (`procfs`, `tasks`, `fdscan`, `sockdiag`, `smbios`, `hccn`), bindings (`nvml`,
`perf_event`, `gpm`), the eBPF host (`bpfhost`; `bpfimage`, `bpfload` and `bpfcache`: a program compiled once per kernel), and what several collectors share (`accel`,
`sampling`, `jobscope`). Each is tested on recorded real files or replayed reads.
"""
