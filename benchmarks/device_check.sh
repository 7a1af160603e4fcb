#!/usr/bin/env bash
# What a session lent a GPU machine measures, in one script: the machine, the GPU
# suite, and the rows that docs/performance.md's GPU targets read (inference at the Original size
# in bf16 and fp32, the LSTM alone against cuDNN, spacy train at the steady state, frozen and
# fine-tuned, against spaCy's CNN config without ELMo on the same GPU), a service on the GPU
# (benchmarks/serving.py --gpu-id 0: nlp(text) serial and from 8 threads against nlp.pipe, and
# spacy-elmo serve --gpu-id 0's latency), then `auto` on the machine's CPU pinned to 2 cores (its AMX rate). Each step writes $OUT/<step>.txt under a time
# limit of its own, so that a slow step cannot take the others' device time; the last lines of
# each are echoed. Run it before a change and after it, on the same machine (timings of
# different cards do not compare).
#
#   OUT=$OUT bash benchmarks/device_check.sh                      # every step: at most 23 minutes by the limits
#   STEPS="env suite serving" bash benchmarks/device_check.sh     # some of them (a call limited to 10 minutes)
#   STEADY_WORDS="1000 4000 10000" bash benchmarks/device_check.sh  # steady rows per batch size
#   QUICK=1 bash benchmarks/device_check.sh                        # tiny sizes: checks the script on a CPU
#
# Where the machine's Python lacks spaCy and cannot reach PyPI: benchmarks/device_site.sh.
set -uo pipefail

OUT="${OUT:-device-out}"
PYTHON="${PYTHON:-python}"
STEPS="${STEPS:-env suite inference serving steady amx}"
STEADY_WORDS="${STEADY_WORDS:-1000}"
QUICK="${QUICK:-}"
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
                run serving 300 "$PYTHON" benchmarks/serving.py --configs bundled --texts 16 --rounds 1 \
                    --clients 1 --clients 4
            else
                run gpu_serving 300 "$PYTHON" benchmarks/serving.py --configs bundled,original --texts 200 \
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
        *)
            echo "unknown step $step: env, suite, inference, serving, steady or amx" >&2
            exit 2
            ;;
    esac
done
