#!/usr/bin/env bash
# Fetch, on a machine with a package index, the wheels that the GPU machine lacks for run.sh: its
# image has torch, nvidia-ml-py, networkx, psutil, PyYAML and tiktoken but no pydantic, and it can
# reach no index. They land in .whl/ at the repository root (x86-64, CPython 3.12: the GPU
# machine's Python), which .gitignore keeps out of the repository; carry it with the run.
#
#   benchmarks/gpu_session/fetch_wheels.sh          # then: carry [".whl"]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
dest="$root/.whl"
git -C "$root" check-ignore -q .whl/x.whl || {
    echo "fetch_wheels: .whl/ is not ignored by git (.gitignore lists /.whl/): the wheels must never be committed" >&2
    exit 2
}
mkdir -p "$dest"
# the versions pydantic pins together (pydantic-core exactly); typing-extensions too, since
# pydantic needs >= 4.14.1 and the image's may be older
timeout 300 python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$dest" \
    pydantic==2.13.4 pydantic-core==2.46.4 annotated-types==0.7.0 typing-inspection==0.4.2 typing-extensions==4.15.0
ls -l "$dest"
