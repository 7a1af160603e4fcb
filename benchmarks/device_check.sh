#!/usr/bin/env bash
# What a session lent a GPU machine measures, in one script: the machine, the GPU
# suite, and the rows that docs/performance.md's GPU targets read (inference at the Original size
# in bf16 and fp32, the LSTM alone against cuDNN, spacy train at the steady state, frozen and
# fine-tuned, against spaCy's CNN config without ELMo on the same GPU), a service on the GPU
# (benchmarks/serving.py rates --gpu-id 0: nlp(text) serial and from 8 threads against nlp.pipe,
# and spacy-elmo serve --gpu-id 0's latency), then `auto` on the machine's CPU pinned to 2 cores
# (its AMX rate). Each step writes $OUT/<step>.txt under a time limit of its own, so that a slow
# step cannot take the others' device time; the last lines of each are echoed. Run it before a
# change and after it, on the same machine (timings of different cards do not compare).
#
#   OUT=$OUT bash benchmarks/device_check.sh                      # every step: at most 23 minutes by the limits
#   STEPS="env suite serving" bash benchmarks/device_check.sh     # some of them (a call limited to 10 minutes)
#   STEADY_WORDS="1000 4000 10000" bash benchmarks/device_check.sh  # steady rows per batch size
#   QUICK=1 bash benchmarks/device_check.sh                        # tiny sizes: checks the script on a CPU
#
# One more step, not among the default ones, for a machine whose Python lacks spaCy and cannot reach
# PyPI (an image with torch, CuPy, Triton, h5py and numpy, as the lent device machines have): `site`
# packs spaCy, thinc, the serve extra (FastAPI, uvicorn) and what they need beside that image, at the
# versions of this checkout's .venv, unpacked for CPython 3.12 on x86-64, stripped, into one tarball
# of about 13 MB ($SITE). Run it here, where pip reaches PyPI, and carry the tarball:
#
#   STEPS=site SITE=.dev/site312.tar.xz bash benchmarks/device_check.sh   # here ($VENV_PIP: .venv/bin/pip)
#   # there: tar xJf .dev/site312.tar.xz -C /tmp/site && export PYTHONPATH=/tmp/site:$PWD
#   #        python3 -m pip install --no-deps --no-index --no-build-isolation -e .   # entry points
#   #        OUT=$OUT PYTHON=python3 bash benchmarks/device_check.sh
set -uo pipefail

OUT="${OUT:-device-out}"
PYTHON="${PYTHON:-python}"
STEPS="${STEPS:-env suite inference serving steady amx}"
STEADY_WORDS="${STEADY_WORDS:-1000}"
QUICK="${QUICK:-}"
SITE="${SITE:-.dev/site312.tar.xz}"
VENV_PIP="${VENV_PIP:-.venv/bin/pip}"
# What the `site` step packs: spaCy's and the serve extra's packages that the device image lacks.
SITE_PACKAGES="${SITE_PACKAGES:-spacy thinc blis catalogue cloudpathlib confection cymem murmurhash preshed pydantic pydantic_core
smart_open spacy-legacy spacy-loggers srsly wasabi weasel typing-inspection annotated-types platformdirs
fastapi starlette uvicorn opentelemetry-api typing_extensions}"
mkdir -p "$OUT"

# run NAME SECONDS COMMAND...: the command's output in $OUT/NAME.txt, its exit status and last lines here.
run() {
    local name=$1 limit=$2
    shift 2
    echo "== $name ($limit s): $*"
    timeout "$limit" "$@" >"$OUT/$name.txt" 2>&1
    echo "exit status $? ($name)"
    tail -n 15 "$OUT/$name.txt"
}

# site TARBALL: $SITE_PACKAGES at $VENV_PIP's versions as CPython 3.12 x86-64 wheels, unpacked and
# stripped into TARBALL (a subshell, so that its `set -e` and its clean-up stay its own).
site() (
    set -euo pipefail
    local tarball=$1 name version work wheel
    local pins=()
    for name in $SITE_PACKAGES; do
        version=$("$VENV_PIP" show "$name" 2>/dev/null | sed -n 's/^Version: //p')
        [ -n "$version" ] || { echo "$name is not installed in $VENV_PIP's environment: make install" >&2; exit 1; }
        pins+=("$name==$version")
    done
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    "$VENV_PIP" download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
        -d "$work/wheels" "${pins[@]}"
    mkdir "$work/site"
    for wheel in "$work"/wheels/*.whl; do
        unzip -q -o "$wheel" -d "$work/site"
    done
    rm -rf "$work/site/spacy/tests" "$work/site/thinc/tests"
    find "$work/site" -name "*.so" -exec strip --strip-unneeded {} +
    mkdir -p "$(dirname "$tarball")"
    tar cJf "$tarball" -C "$work/site" .
    echo "$tarball: $(du -h "$tarball" | cut -f1), ${#pins[@]} packages"
)

for step in $STEPS; do
    case $step in
        env)
            run env 120 "$PYTHON" -c "
import platform, subprocess, sys
import spacy, thinc, torch
print(sys.version.split()[0], platform.platform())
print('torch', torch.__version__, 'CUDA', torch.version.cuda, 'spaCy', spacy.__version__, 'thinc', thinc.__version__)
print('GPU:', torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'none visible')
print('TF32 defaults: matmul', torch.backends.cuda.matmul.allow_tf32, 'cuDNN', torch.backends.cudnn.allow_tf32,
      'cuDNN RNN fp32_precision', getattr(getattr(torch.backends.cudnn, 'rnn', None), 'fp32_precision', 'n/a'))
lscpu = subprocess.run(['lscpu'], capture_output=True, text=True).stdout.splitlines()
print('\n'.join(line for line in lscpu if line.startswith(('Model name', 'CPU(s)', 'Flags'))))
"
            ;;
        suite)
            run gpu_suite 240 env CUBLAS_WORKSPACE_CONFIG=:4096:8 "$PYTHON" -m pytest -q -rs -m gpu tests/gpu
            ;;
        inference)
            run gpu_inference 180 "$PYTHON" benchmarks/gpu.py ${QUICK:+--quick} --tasks inference,lstm --repeats 3
            ;;
        serving)
            if [ -n "$QUICK" ]; then
                run serving 300 "$PYTHON" benchmarks/serving.py rates --configs bundled --texts 16 --rounds 1 \
                    --clients 1 --clients 4
            else
                run gpu_serving 300 "$PYTHON" benchmarks/serving.py rates --configs bundled,original --texts 200 \
                    --clients 1 --clients 8 --clients 32 --gpu-id 0
            fi
            ;;
        steady)
            for words in $STEADY_WORDS; do
                run "gpu_steady_${words}w" 240 "$PYTHON" benchmarks/gpu.py ${QUICK:+--quick} --tasks steady \
                    --steady-docs 1000 --steady-steps 10 --steady-batch-words "$words"
            done
            ;;
        amx)
            if [ -n "$QUICK" ]; then
                run auto_precision_2cores 300 "$PYTHON" benchmarks/auto_precision.py --threads 1 --rows 4 \
                    --words 3 --max-words 5 --batches 1 --repeats 1
            else
                run auto_precision_2cores 300 taskset -c 0,1 "$PYTHON" benchmarks/auto_precision.py --threads 2
            fi
            ;;
        site)
            echo "== site: $SITE"
            site "$SITE" || exit 1
            ;;
        *)
            echo "unknown step $step: env, suite, inference, serving, steady, amx or site" >&2
            exit 2
            ;;
    esac
done
