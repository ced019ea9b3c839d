#!/usr/bin/env bash
# The first thing to run on a GPU machine: each stage of the GPU path once, with its time and PASS/FAIL.
#   setup   scripts/setup.sh --gpu: the CUDA builds of torch (.venv) and vLLM (.venv-vllm), the model, the tasks
#   cuda    .venv's torch sees a GPU; .venv-vllm's vLLM is the CUDA platform
#   serve   the embedded SmolLM2 on vLLM's CUDA build (the launcher, WEIGHT_SYNC=broadcast's worker extension)
#   step    one FSDP2 step on NCCL, its weights pushed by broadcast, the server's log-probs moved
#           (scripts/gpu_check_step.py; NCCL refuses two ranks on one GPU, so with one GPU the push goes over gloo)
#   grpo    one GRPO step of the embedded default end to end (run_grpo.sh, NUM_ROLLOUTS=1): split on two GPUs
#           (server on GPU 0, trainer on GPU 1), colocated on one (COLOCATE=true: the server sleeps while it steps)
# Usage: bash scripts/gpu_check.sh [--wheels DIR] [--out DIR] [--port PORT] [--skip-setup] [--dry-run]
#   --wheels DIR   install from the wheels brought along in DIR only (no index)
#   --out DIR      logs and results (default: a new temporary folder)
#   --port PORT    the server's port (default 8011)
#   --skip-setup   the environments are ready: start at the cuda stage
#   --dry-run      print the stages' commands, run nothing
# Exit: 0 all run stages passed, 1 a stage failed, 2 bad arguments, 3 no NVIDIA GPU.
set -euo pipefail
cd "$(dirname "$0")/.."

die() { echo "gpu_check: $*" >&2; exit 2; }
wheels="" out="" port=8011 setup=1 dry=0
while (($#)); do
  case "$1" in
    --wheels) [[ -d "${2:-}" ]] || die "--wheels needs a folder of wheels"; wheels="$(cd "$2" && pwd)"; shift 2 ;;
    --out) [[ -n "${2:-}" ]] || die "--out needs a folder"; out="$2"; shift 2 ;;
    --port) [[ "${2:-}" =~ ^[0-9]+$ ]] || die "--port needs a port number"; port="$2"; shift 2 ;;
    --skip-setup) setup=0; shift ;;
    --dry-run) dry=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $1 (--help lists them)" ;;
  esac
done

gpus="$(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | grep -c '^[0-9]' || true)"
if ((${gpus:-0} < 1)); then
  echo "gpu_check: no NVIDIA GPU here (nvidia-smi lists none): this check needs at least one CUDA GPU. The CPU" \
       "paths it stands on are tested by scripts/test.sh." >&2
  exit 3
fi
if ((dry)); then
  out="${out:-(a new temporary folder)}"  # a dry run starts nothing and leaves nothing behind
else
  out="${out:-$(mktemp -d "${TMPDIR:-/tmp}/gpu_check.XXXXXX")}"
  mkdir -p "$out"
fi
url="http://127.0.0.1:$port/v1"
if ((gpus >= 2)); then train_gpu=1 sync=nccl grpo_place=split; else train_gpu=0 sync=gloo grpo_place=colocated; fi
server_pid=""
passed=0 t_start=$(date +%s.%N)

stop_server() {  # the launcher stops the server's process group on SIGTERM
  if [[ -n "$server_pid" ]]; then
    kill -TERM "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  server_pid=""
}
trap stop_server EXIT

elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }

stage() {  # stage NAME COMMAND...: its output in $out/NAME.log; prints its time and PASS, or FAIL and the log's tail
  local name="$1" t0 rc=0
  shift
  if ((dry)); then echo "would run  $name"; return 0; fi
  t0=$(date +%s.%N)
  "$@" >"$out/$name.log" 2>&1 || rc=$?
  if ((rc == 0)); then
    echo "PASS  $name  $(elapsed "$t0") s"
    passed=$((passed + 1))
    return 0
  fi
  echo "FAIL  $name  $(elapsed "$t0") s  (exit $rc; log: $out/$name.log)"
  tail -n 25 "$out/$name.log" | sed 's/^/      /'
  echo "gpu_check: FAIL after $passed passed stage(s), $(elapsed "$t_start") s; logs in $out"
  exit 1
}

install() {
  if [[ -n "$wheels" ]]; then
    PIP_FIND_LINKS="$wheels" PIP_NO_INDEX=1 bash scripts/setup.sh --gpu
  else
    bash scripts/setup.sh --gpu
  fi
}

cuda_ready() {
  .venv/bin/python -c 'import torch; assert torch.cuda.is_available(), "no CUDA in .venv torch"
print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0))'
  "${VLLM_PYTHON:-.venv-vllm/bin/python}" -c 'from vllm.platforms import current_platform as p; assert p.is_cuda(), p
import vllm; print("vllm", vllm.__version__, "on CUDA")'
}

healthy() {
  .venv/bin/python -c "import sys, urllib.request as u
sys.exit(u.urlopen('http://127.0.0.1:$port/health', timeout=5).status != 200)" 2>/dev/null
}

serve() {  # in the background; ready once /health answers
  WEIGHT_SYNC=broadcast INFERENCE_GPUS=0 .venv/bin/python -m qwen_swe.inference.launcher --model embedded \
    --port "$port" --log-file "$out/vllm.log" >"$out/launcher.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 600); do
    if healthy; then
      grep -m1 "CUDA_VISIBLE_DEVICES" "$out/launcher.log" || true  # the command it started, placed
      return 0
    fi
    kill -0 "$server_pid" 2>/dev/null || { cat "$out/launcher.log"; return 1; }
    sleep 1
  done
  echo "the server did not answer within 600 s; see $out/vllm.log"
  return 1
}

step() {
  CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES="$train_gpu" PYTHONPATH="$PWD" OMP_NUM_THREADS=1 \
    .venv/bin/python -m torch.distributed.run --log-dir="$out/torchrun" --standalone --nproc_per_node=1 scripts/gpu_check_step.py \
    --url "$url" --out "$out" --sync-backend "$sync"
}

grpo() {  # on one GPU the run's trainer and server take turns on it
  local place=(INFERENCE_GPUS=0 TRAIN_GPUS=1)
  if [[ "$grpo_place" == colocated ]]; then place=(COLOCATE=true INFERENCE_GPUS=0 TRAIN_GPUS=0); fi
  env "${place[@]}" NUM_ROLLOUTS=1 WEIGHT_SYNC=broadcast OUTPUT_DIR="$out/run" bash examples/qwen_swe/run_grpo.sh
}

echo "gpu_check: $gpus GPU(s): server on GPU 0, trainer on GPU $train_gpu, broadcast over $sync, the GRPO step" \
     "$grpo_place; logs in $out"
if ((setup)); then stage setup install; fi
stage cuda cuda_ready
stage serve serve
stage step step
stop_server  # the GRPO run starts its own server
stage grpo grpo
if ((dry)); then echo "gpu_check: dry run, nothing started"; exit 0; fi
echo "gpu_check: PASS, $passed stage(s) in $(elapsed "$t_start") s; logs in $out"
