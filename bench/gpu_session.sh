#!/usr/bin/env bash
# A GPU session's first call for chapter 10's speed: where the gpu preset's step goes, plain and compiled, and the
# whole run compiled, each step of it capped so that one overrun leaves the others their time. About 9 minutes at
# most; every result lands in OUT (at most 8 files, for the device tool to bring back).
#
#   bench/gpu_session.sh OUT          on the GPU machine, in a copy of this repository, with Multi30k in
#                                     TRANSFORMER_BOOK_DATA (copy ../shared/data into an ignored folder and carry it)
#   GPU_SESSION_DEVICE=cpu bench/gpu_session.sh OUT    the same commands on a machine without a GPU, at the smoke
#                                     preset's size: a rehearsal (minutes, most of it compiling)
#
# The package runs from src/ over the machine's own PyTorch: its other needs (tokenizers, sacrebleu, safetensors,
# tqdm) are in the GPU machine's image. OUT gets env.txt, steps_4000.jsonl, steps_16000.jsonl, run_compiled.jsonl,
# the record run_compiled.json and session.log.
set -uo pipefail
out="$(realpath -m "${1:?usage: $0 OUT}")"
here="$(cd "$(dirname "$0")/.." && pwd)"
python="${PYTHON:-python3}"
mkdir -p "$out"
cd "$here"
export PYTHONPATH="$here/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
: "${TRANSFORMER_BOOK_DATA:?name the folder that holds multi30k/}"

if [[ "${GPU_SESSION_DEVICE:-cuda}" == cpu ]]; then
  breakdown=(--preset smoke --steps 3 --warmup 2) small=400 large=800
  run=(--device cpu --preset smoke --epochs 2 --warmup 2)
else
  breakdown=() small=4000 large=16000
  run=(--epochs 30 --warmup 1)
fi

# step NAME SECONDS COMMAND...: runs COMMAND with a cap, logging its start, end and status to session.log
step() {
  local name="$1" seconds="$2"
  shift 2
  echo "$(date -u +%T) start $name (cap ${seconds}s)" >>"$out/session.log"
  local began=$SECONDS status=0
  timeout --signal=INT --kill-after=20 "$seconds" "$@" 2>>"$out/session.log" || status=$?
  echo "$(date -u +%T) end $name: status $status after $((SECONDS - began))s" >>"$out/session.log"
}

{
  date -u
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv 2>&1 || echo "no nvidia-smi"
  "$python" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda,
      'device', torch.cuda.get_device_name() if torch.cuda.is_available() else 'cpu')"
  nproc
} >"$out/env.txt" 2>&1

# 1. The step at the batch size chapter 10 trains with: plain, then compiled with lengths as they come and padded.
step steps_4000 220 "$python" bench/step_breakdown.py "${breakdown[@]}" --tokens "$small" \
  --variants eager compiled --pad-multiple 1 8 >"$out/steps_4000.jsonl"
# 2. Four times the tokens a batch: how far the step's fixed cost falls per token.
step steps_16000 100 "$python" bench/step_breakdown.py "${breakdown[@]}" --tokens "$large" \
  --variants eager compiled --pad-multiple 8 >"$out/steps_16000.jsonl"
# 3. The whole preset, compiled, every evaluation and save included: its wall time and validation BLEU by epoch.
step run_compiled 240 "$python" bench/gpu_check.py "${run[@]}" --compile --record "$out/run_compiled.json" \
  >"$out/run_compiled.jsonl"
echo "$(date -u +%T) done" >>"$out/session.log"
