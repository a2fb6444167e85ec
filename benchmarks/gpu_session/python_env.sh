# Sourced by run.sh and gpm.sh (bash, set -euo pipefail, in the repository root, $py the Python):
# makes witty-profiler importable on the GPU machine, whose image has torch, nvidia-ml-py, networkx,
# psutil, PyYAML and tiktoken but no pydantic and no package index. pydantic comes from the wheels
# fetch_wheels.sh put in .whl/ (carried with the run); the checkout itself goes on PYTHONPATH.
# Exits 2 when a prerequisite is missing.
if ! "$py" -c "import pydantic" 2>/dev/null; then
    if compgen -G ".whl/*.whl" > /dev/null; then
        timeout 120 "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            --target /tmp/site .whl/*.whl
        export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
    else
        echo "python_env: pydantic is missing and no .whl/ was carried (see benchmarks/gpu_session/fetch_wheels.sh)"
        exit 2
    fi
fi
case ":${PYTHONPATH:-}:" in
    *":$PWD:"*) ;;
    *) export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" ;;
esac
"$py" -c "import pydantic, pynvml, witty_profiler.cli, benchmarks.record_nvml" \
    || { echo "python_env: witty-profiler does not import with this Python"; exit 2; }
