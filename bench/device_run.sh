#!/usr/bin/env bash
# How the H200 figures in bench/RESULTS.md are taken, in one device call once the model's parts
# are in /root/parts (../shared/device/README.md: 48 MiB parts, one call each; the GPU image has
# torch/triton/transformers but not gguf, whose wheel travels in .whl/). Logs and JSON go to $OUT.
#
#   bench/device_run.sh COMMIT [bench ...]      (benches: rag concurrency spec8; default all)
set -u
export EDITAPPLY_COMMIT=${1:-unknown}; shift || true
benches=${*:-rag concurrency spec8}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
cat /root/parts/part-* > /root/model.gguf || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD EDITAPPLY_HOME=/root/eahome OUT
python3 -m engine.cli pull qwen2.5-coder-0.5b --gguf /root/model.gguf > "$OUT/pull.log" 2>&1 || { tail "$OUT/pull.log"; exit 1; }
for b in $benches; do
  case $b in
    rag) timeout 110 python3 -m bench.rag ;;
    concurrency) timeout 150 python3 -m bench.concurrency --cases 16 --max-tokens 1024 ;;
    spec8) timeout 90 python3 -m bench.spec_decode --limit 8 --no-hf --no-vllm --plot "$OUT/spec_decode_cuda_ours" ;;
  esac > "$OUT/$b.log" 2>&1
  echo "$b: exit $?"; tail -4 "$OUT/$b.log"
done
