#!/usr/bin/env bash
# One lease of the GPU machine, many figures: the model parts travel one call each (64 MiB a call,
# ../shared/device/README.md) while jobs that need no model, or a model already there, run in the
# background. The machine is given back 30 s after a call, so the calls follow each other closely;
# a job outlives its call (setsid) and jobs run one at a time (flock), in the order queued (one
# queue call's jobs in order; two queue calls' loops take the lock in no set order). The tree is
# ~22 MB, so a GGUF travels in 41 MiB parts (`split -b 41M`, one pN folder each): ~3 s a call.
#
#   bench/device_session.sh start COMMIT     install the carried wheels (.whl/), copy .old/ if carried.
#                                            The image lacks gguf, unidiff, pydantic (+ pydantic-core,
#                                            -settings, annotated-types, typing-inspection, python-dotenv),
#                                            tree-sitter and its 11 grammars: cp312 manylinux wheels of the
#                                            versions in .venv (../shared/device/README.md says how)
#   bench/device_session.sh part DIR NAME    keep a carried part folder (.devmodel/05/p3) under /root/parts/NAME
#   bench/device_session.sh queue JOB...     run jobs in the background, after those queued before, on a
#                                            snapshot of this call's checkout (COMMIT=sha names it if
#                                            it is not start's)
#   FILLER=1 bench/device_session.sh queue JOB...   the same, as filler: jobs that use the GPU while
#                                            parts still travel, given up for the jobs that need them
#   bench/device_session.sh stop_filler      end the running filler job and skip the rest
#   bench/device_session.sh collect [WAIT]   wait up to WAIT s for the queue to drain, results into $OUT
#
# Issue 35's batch, on an H200 when one is lent: stepsK64 pull05 apply05_default concurrency_default_ab
# equal_default_inv rag_default (then pull15: apply15_default).
# Jobs (logs and JSON in /root/results): stepsK64, apply05_default, concurrency_default, concurrency_default_ab, equal_default_inv,
# apply15_default, workloads15_default, rag_default, stepsK, applyK05, applyK05b, applyK15, applyK15b, concurrencyK, concurrencyK32, concurrencyK48, equalK_inv, kernels, kernels_engine, before, step05, check05, step15, step7, steps_ahead, profile, profile_graphs, attention_layout, attention_layout64, attention_layout2, steps_ab, concurrency05_ab1,
# attention_prefill, linear_small, steps_fresh05, steps_fresh15, apply05_switches, concurrency_switches, int8_gaps05, pull05, spec60, apply60, ahead60, ahead15, apply15_ab, kl, needle,
# apply_train, pull15, drafters, drafters_lh, drafters60, concurrency, concurrency_short, draft_tokens, beside, drafters_ahead,
# beside_old, hybrid_old (an older tree carried in .old/), heads_train, heads_drafters, heads_noshort, heads_drafters60,
# heads_concurrency, heads_full, heads_ragchat, heads_concurrency4, heads_train_answers,
# heads_old_ragchat, heads_put, concurrency_profile, apply05, apply15, model15, ranking, ranking05, ranking15, ranking15_profile, concurrency05, concurrency05_rounds, concurrency05_ahead, concurrency05_old, concurrency05_ab, concurrency05_ab64, concurrency05_64, ranking_cpu, step05_int8_ab, ranking05_old,
# ranking15_old, graphs, concurrency05_profile, equal60, equal60_inv, kernels_inv, batch15, rag, rag_old,
# apply60_old, stepfp, stepfp_old, served. bench/device_run.sh is the
# one-call form of the same.
set -u
ROOT=${DEVICE_ROOT:-/root}
SRC=${SRC:-} RES=$ROOT/results LOCK=$ROOT/gpu.lock
OUT=${OUT:-/tmp/out}

setup_env() {
  export PYTHONPATH=$ROOT/site:$SRC EDITAPPLY_HOME=$ROOT/eahome PYTHONUNBUFFERED=1
  export EDITAPPLY_COMMIT=$(cat $SRC/.commit 2>/dev/null || echo unknown) OUT=$RES
}

HEADS=$ROOT/eahome/models/qwen2.5-coder-1.5b/draft_heads/heads.safetensors  # the 1.5B's draft heads

train_heads15() {  # train_heads15 TIMEOUT [ARGS]: the 1.5B's heads on the carried corpus, copied to the results
  local limit=$1; shift
  rm -rf $ROOT/corpus && cat $ROOT/parts/corpus/part-* | tar -xJ -C $ROOT && \
    timeout $limit python3 -m engine.cli train-heads --model qwen2.5-coder-1.5b --corpus $ROOT/corpus --steps 2000 \
      --max-seconds ${HEADS_SECONDS:-240} "$@" && cp $HEADS $RES/
}

in_old() {  # in_old CMD...: CMD in the older tree carried in .old/ (copied to $ROOT/old at start), labelled with its commit
  (cd $ROOT/old && PYTHONPATH=$ROOT/site:$ROOT/old EDITAPPLY_COMMIT=$(cat $ROOT/old/.commit) "$@")
}

pull() {  # pull NAME PARTS: assemble the parts and install the preset from them
  cat $ROOT/parts/$2/part-* > $ROOT/$2.gguf && python3 -m engine.cli pull "$1" --gguf $ROOT/$2.gguf && rm $ROOT/$2.gguf
}

job() {
  setup_env
  cd $SRC || exit 1
  local t=timeout
  case $1 in
    kernels) $t 300 python3 -m pytest -q -p no:cacheprovider tests/kernels ;;
    kernels_engine) $t 300 python3 -m pytest -q -p no:cacheprovider tests/kernels -k "engine_tokens or fused or tiles or graph" ;;
    # The CUDA graphs against eager steps (tokens, scores, short prefills) and the graphs' inputs' layout.
    graphs) $t 300 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_graphs.py tests/kernels/test_decode_chain.py \
      tests/test_graph_inputs.py ;;
    # Kernels per step of an older engine: its tree carried in .old/ (git archive), copied to /root/old.
    before) $t 200 python3 $ROOT/old/count_before.py ;;
    step05) $t 420 python3 -m bench.step_time --shape qwen2.5-coder-0.5b --contexts 1024 4096 16384 --no-hf --kernels --int8-head off on ;;
    step15) $t 240 python3 -m bench.step_time --shape qwen2.5-coder-1.5b --contexts 4096 --no-hf --no-eager --no-checks --int8-head off on ;;
    step7) $t 300 python3 -m bench.step_time --shape qwen2.5-coder-7b --contexts 4096 --no-hf --no-eager --no-checks ;;
    # One shape, one context: graph step times and the graph-versus-eager checks (batch of three included).
    check05) $t 240 python3 -m bench.step_time --shape qwen2.5-coder-0.5b --contexts 4096 --no-hf --no-eager ;;
    # Graph step times, the K=16 step planned ahead among them, of the three shapes (0.5B at three contexts).
    steps_ahead)
      $t 200 python3 -m bench.step_time --shape qwen2.5-coder-0.5b --contexts 1024 4096 16384 --no-hf --no-eager --no-checks
      for s in 1.5b 7b; do $t 200 python3 -m bench.step_time --shape qwen2.5-coder-$s --contexts 4096 --no-hf --no-eager --no-checks; done ;;
    # GPU time per kernel family of a graph replay (and of an eager step for the 0.5B), all three shapes at 4k.
    profile)
      $t 200 python3 -m bench.step_time --shape qwen2.5-coder-0.5b --contexts 4096 --no-hf --no-checks --profile
      for s in 1.5b 7b; do $t 200 python3 -m bench.step_time --shape qwen2.5-coder-$s --contexts 4096 --no-hf --no-eager --no-checks --profile; done ;;
    # The same for the graph step alone, the two batch-1 models (issue 35's kernel budget): no model needed.
    profile_graphs) for s in 0.5b 1.5b; do $t 150 python3 -m bench.step_time --shape qwen2.5-coder-$s --contexts 4096 \
      --no-hf --no-eager --no-checks --profile; done ;;
    # The attention kernel's layouts at the batch-1 verify shapes (rows per program x splits, then tiles).
    attention_layout) $t 400 python3 -m bench.attention --sweep-layout --shapes 0.5b 1.5b --contexts 4096 --k 16 ;;
    # The default block's attention (64 queries: the family that grows most from 16 rows to 64).
    attention_layout64) $t 400 python3 -m bench.attention --sweep-layout --shapes 0.5b 1.5b --contexts 4096 --k 64 ;;
    # Graph step times at 4k of the two batch-1 models, this tree and the one in .old/ in turn.
    steps_ab) for run in "" in_old "" in_old; do for s in 0.5b 1.5b; do $run $t 150 python3 -m bench.step_time \
      --shape qwen2.5-coder-$s --contexts 4096 --no-hf --no-eager --no-checks; done; done ;;
    # The same levels as concurrency05_ab, this tree and .old/ once each.
    concurrency05_ab1) for run in "" in_old; do $run $t 200 python3 -m bench.concurrency --levels 8 32 64 \
      --cases 0 --modes "lookup K=16 +prediction"; done ;;
    # The small projections (q|k|v, o) at 16 rows: cuBLAS against Triton tiles.
    linear_small) $t 300 python3 -m bench.linear_small ;;
    # A first prompt chunk's launch parameters (2k and 4k), against SDPA.
    attention_prefill) $t 400 python3 -m bench.attention --sweep-prefill --shapes 0.5b 1.5b --contexts 2048 4096 ;;
    # The same layouts at the 7B's point and at 1k and 16k.
    attention_layout2) $t 400 python3 -m bench.attention --sweep-layout --shapes 7b --contexts 4096 --k 16
      $t 400 python3 -m bench.attention --sweep-layout --shapes 0.5b 1.5b --contexts 1024 16384 --k 16 ;;
    apply60) $t 150 python3 -m bench.spec_decode --limit 0 --no-hf --no-vllm --plot $RES/spec60 --configs "lookup K=16 +prediction" ;;
    # The 60 apply cases with the next step planned ahead off and on, alternating (one lease, one process each).
    ahead60) for a in 0 1 0 1; do EDITAPPLY_PLAN_AHEAD=$a $t 150 python3 -m bench.spec_decode --limit 0 --no-hf --no-vllm \
      --plot $RES/ahead60_$a --configs "lookup K=16 +prediction" && cp $RES/spec_decode_cuda.json $RES/ahead60_${a}_$(date +%s).json; done ;;
    # The 1.5B on the 60 apply cases, lookup, this tree and .old/ in turn.
    apply15_ab) for run in "" in_old; do $run $t 200 python3 -m bench.drafters --limit 60 --max-tokens 2048 \
      --workloads apply --drafters lookup; done ;;
    # The 1.5B on the 60 apply cases, lookup, planned ahead off and on, alternating.
    ahead15) for a in 0 1 0 1; do EDITAPPLY_PLAN_AHEAD=$a $t 150 python3 -m bench.drafters --limit 60 --max-tokens 2048 \
      --workloads apply --drafters lookup; done ;;
    pull05) pull qwen2.5-coder-0.5b q05 ;;
    pull15) pull qwen2.5-coder-1.5b q15 ;;
    spec60)
      $t 150 python3 -m bench.spec_decode --limit 0 --no-hf --no-vllm --plot $RES/spec60 --configs "lookup K=16 +prediction"
      $t 240 python3 -m bench.spec_decode --limit 8 --no-hf --no-vllm --plot $RES/spec8 ;;
    kl) $t 240 python3 -m bench.rag --kl-only ;;
    # Eager for every format (int4 runs without graphs anyway), and no capture of ~128 graphs per engine.
    needle) EDITAPPLY_ENFORCE_EAGER=1 $t 420 python3 -m bench.needle ;;
    drafters) $t 480 python3 -m bench.drafters --limit 8 --max-tokens 256 ;;
    drafters_lh) $t 300 python3 -m bench.drafters --limit 8 --max-tokens 256 --drafters lookup hybrid ;;
    drafters60) $t 300 python3 -m bench.drafters --limit 60 --max-tokens 2048 --workloads apply --drafters lookup hybrid ;;
    concurrency) $t 420 python3 -m bench.concurrency --model qwen2.5-coder-1.5b --cases 16 --max-tokens 256 \
      --levels 1 8 32 --modes "lookup K=16 +prediction" "hybrid K=16 +prediction" ;;
    # Each level held for 4 requests per slot, the two modes twice, alternating.
    concurrency_rounds) $t 420 python3 -m bench.concurrency --model qwen2.5-coder-1.5b --cases 16 --max-tokens 256 --rounds 4 \
      --levels 1 8 32 --modes "lookup K=16 +prediction" "hybrid K=16 +prediction" "lookup K=16 +prediction" "hybrid K=16 +prediction" ;;
    concurrency_short) $t 200 python3 -m bench.concurrency --model qwen2.5-coder-1.5b --cases 16 --max-tokens 256 \
      --levels 8 32 --modes "lookup K=16 +prediction" "hybrid K=16 +prediction" ;;
    # A random-weight 0.5B drafting on its own stream beside the 1.5B's K=16 step (drafting ahead).
    beside) $t 300 python3 -m bench.step_time --shape qwen2.5-coder-1.5b --beside qwen2.5-coder-0.5b --contexts 1024 4096 ;;
    # The hybrid drafting ahead beside lookup, then the hybrid without it.
    drafters_ahead)
      EDITAPPLY_DRAFT_AHEAD=1 $t 300 python3 -m bench.drafters --limit 8 --max-tokens 256 --drafters lookup hybrid
      EDITAPPLY_DRAFT_AHEAD=0 $t 240 python3 -m bench.drafters --limit 8 --max-tokens 256 --drafters hybrid \
        --workloads instruction rag chat ;;
    draft_tokens)
      for d in 3 7; do EDITAPPLY_DRAFT_TOKENS=$d $t 200 python3 -m bench.drafters --limit 8 --max-tokens 256 \
        --workloads instruction rag chat --drafters hybrid; done ;;
    # The same measurements on an older tree, carried in .old/ (git archive) and copied to /root/old at
    # start: an A/B within one lease (leases differ in host speed).
    beside_old) in_old $t 300 python3 -m bench.step_time --shape qwen2.5-coder-1.5b --beside qwen2.5-coder-0.5b \
      --contexts 1024 4096 ;;
    hybrid_old) in_old $t 300 python3 -m bench.drafters --limit 8 --max-tokens 256 --drafters hybrid \
      --workloads instruction rag chat ;;
    # The 1.5B's draft heads (engine/speculative/heads.py), trained on the carried corpus (bench/heads_corpus.py,
    # a part named corpus), then the drafters and the concurrency levels with them.
    heads_train) train_heads15 420 ;;
    # The same, half of each batch from the target's answers to 1,024 requests made from the corpus.
    heads_train_answers) train_heads15 560 --answers 1024 --answer-tokens 256 ;;
    # Heads carried from an earlier lease (a part named newheads) put next to the model.
    heads_put) mkdir -p $(dirname $HEADS) && cat $ROOT/parts/newheads/part-* > $HEADS ;;
    heads_drafters) $t 420 python3 -m bench.drafters --limit 8 --max-tokens 256 --draft-model heads \
      --drafters none lookup hybrid draft && cp $RES/drafters_cuda.json $RES/drafters_heads.json ;;
    # Lookup and the hybrid with the heads, verify blocks of <= 4 replaying K=16 graphs (no short block).
    heads_noshort) EDITAPPLY_SHORT_BLOCK=0 $t 300 python3 -m bench.drafters --limit 8 --max-tokens 256 --draft-model heads \
      --drafters lookup hybrid && cp $RES/drafters_cuda.json $RES/drafters_heads_noshort.json ;;
    heads_drafters60) $t 300 python3 -m bench.drafters --limit 60 --max-tokens 2048 --workloads apply \
      --draft-model heads --drafters lookup hybrid && cp $RES/drafters_cuda.json $RES/drafters60_heads.json ;;
    # (a) and (b) to the end of each answer (an instruction-only edit's new lines come late in the file).
    heads_full) $t 480 python3 -m bench.drafters --limit 8 --max-tokens 4096 --workloads apply instruction \
      --draft-model heads --drafters none lookup hybrid draft && cp $RES/drafters_cuda.json $RES/drafters_heads_full.json ;;
    heads_ragchat) $t 300 python3 -m bench.drafters --limit 8 --max-tokens 256 --workloads rag chat \
      --draft-model heads --drafters none lookup hybrid draft && cp $RES/drafters_cuda.json $RES/drafters_heads_ragchat.json ;;
    # RAG and chat with heads carried from an earlier lease (a part named oldheads), the trained ones put back after.
    heads_old_ragchat)
      cp $HEADS $ROOT/heads_new.safetensors && cat $ROOT/parts/oldheads/part-* > $HEADS && \
      $t 300 python3 -m bench.drafters --limit 8 --max-tokens 256 --workloads rag chat --draft-model heads \
        --drafters lookup hybrid && cp $RES/drafters_cuda.json $RES/drafters_heads_old_ragchat.json
      cp $ROOT/heads_new.safetensors $HEADS ;;
    # Each level held for 4 requests per slot, lookup and the hybrid twice, alternating.
    heads_concurrency4) $t 480 python3 -m bench.concurrency --model qwen2.5-coder-1.5b --cases 16 --max-tokens 256 \
      --rounds 4 --draft-model heads --levels 1 8 32 --modes "lookup K=16 +prediction" "hybrid K=16 +prediction" \
      "lookup K=16 +prediction" "hybrid K=16 +prediction" ;;
    # Where 8 and 32 requests spend a verify step's host time: the timed runs, then one of each mode under cProfile.
    concurrency_profile) $t 480 python3 -m bench.concurrency --model qwen2.5-coder-1.5b --cases 16 --max-tokens 256 \
      --rounds 2 --draft-model heads --levels 8 32 --modes "lookup K=16 +prediction" "hybrid K=16 +prediction" --profile 15 ;;
    heads_concurrency) $t 420 python3 -m bench.concurrency --model qwen2.5-coder-1.5b --cases 16 --max-tokens 256 \
      --rounds 2 --draft-model heads --levels 1 8 32 --modes "lookup K=16 +prediction" "hybrid K=16 +prediction" ;;
    # Apply quality on every dev set (issue 30): auto with each model, the 1.5B's model mode; and what
    # ranking a 300-line file's readings costs.
    apply05) $t 900 python3 -m bench.apply_eval --data bench/data/dev.jsonl bench/data/dev_messy.jsonl \
      bench/data/dev_hard.jsonl --methods auto-0.5b --json $RES/apply_auto05.json ;;
    apply15) $t 900 python3 -m bench.apply_eval --data bench/data/dev.jsonl bench/data/dev_messy.jsonl \
      bench/data/dev_hard.jsonl --methods auto-1.5b --json $RES/apply_auto15.json ;;
    # `auto` on the train sets (the rules are fitted there: RESULTS "Apply quality" says which).
    apply_train) $t 900 python3 -m bench.apply_eval --data bench/data/dev_hard_train.jsonl bench/data/dev_hard_train2.jsonl \
      --methods auto-0.5b auto-1.5b --json $RES/apply_train.json ;;
    model15) $t 1500 python3 -m bench.apply_eval --data bench/data/dev.jsonl bench/data/dev_messy.jsonl \
      bench/data/dev_hard.jsonl --methods model-1.5b-draft+pred --json $RES/apply_model15.json ;;
    # A later RAG question against the first (issue 35), this tree's and the older one's (.old/), in turn.
    rag) $t 300 python3 -m bench.rag --questions 10 ;;
    # The served path (RESULTS "Robustness under load"): smollm2 from the parts kept as "smol"
    # (its GGUF split in 36 MiB parts), 32 streamed-chat clients, the engine in its own process
    # and in the server's thread in turn.
    served) pull smollm2-135m smol && for m in 1 0 1; do
        $t 200 python3 -m bench.load --mix chat-stream --clients 32 --max-num-seqs 32 --max-tokens 128 --duration 30 \
          --server-env EDITAPPLY_ENGINE_PROCESS=$m --json served_p${m}_$RANDOM.json; done ;;
    rag_old) in_old $t 300 python3 -m bench.rag --questions 10 ;;
    # The step loop's fingerprint (bench/step_fingerprint.py) with the 0.5B on the GPU, this tree and the older one.
    stepfp) $t 300 python3 -m bench.step_fingerprint --model qwen2.5-coder-0.5b ;;
    stepfp_old) in_old $t 300 python3 -m bench.step_fingerprint --model qwen2.5-coder-0.5b ;;
    # The 0.5B's 60 apply cases of the older tree: a refactor must keep its tokens and steps (issue 33).
    apply60_old) in_old $t 150 python3 -m bench.spec_decode --limit 0 --no-hf --no-vllm --plot $RES/spec60_old \
      --configs "lookup K=16 +prediction" && cp $RES/spec_decode_cuda.json $RES/spec60_old.json ;;
    ranking) for m in qwen2.5-coder-0.5b qwen2.5-coder-1.5b; do $t 300 python3 -m bench.ranking --model $m --repeats 10; done ;;
    # Speculation against plain decoding in bf16 on the 60 dev apply cases (the 0.5B): outputs identical, tok/s.
    equal60) $t 540 python3 -m bench.spec_decode --limit 0 --no-hf --no-vllm --plot $RES/equal60 \
      --configs plain "lookup K=16" "lookup K=16 +prediction" && cp $RES/spec_decode_cuda.json $RES/equal60.json ;;
    # The same with the batch-invariant kernels on (EDITAPPLY_BATCH_INVARIANT), and those kernels' tests natively.
    equal60_inv) EDITAPPLY_BATCH_INVARIANT=on $t 540 python3 -m bench.spec_decode --limit 0 --no-hf --no-vllm \
      --plot $RES/equal60_inv --configs plain "lookup K=16" "lookup K=16 +prediction" \
      && cp $RES/spec_decode_cuda.json $RES/equal60_inv.json ;;
    # The 0.5B's graph step at 4k with the int8 lm_head off and on, this tree's and the older one's (.old/).
    step05_int8_ab) for run in "" in_old; do $run $t 200 python3 -m bench.step_time --shape qwen2.5-coder-0.5b \
      --contexts 4096 --no-hf --no-eager --no-checks --int8-head off on; done ;;
    # The Triton linears (fixed tiles, int8; kernels/tiles.py's loop) and the invariant attention, natively.
    kernels_inv) $t 300 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_invariant_linear.py \
      tests/kernels/test_int8_linear.py tests/kernels/test_paged_attention.py -k "invariant or each_row or matches_torch or triton" ;;
    # The 1.5B at batch 1 on the 60 dev apply cases, lookup.
    batch15) $t 300 python3 -m bench.drafters --limit 60 --max-tokens 2048 --workloads apply --drafters lookup \
      && cp $RES/drafters_cuda.json $RES/batch15.json ;;
    ranking05) $t 300 python3 -m bench.ranking --model qwen2.5-coder-0.5b --repeats 10 ;;
    ranking15) $t 300 python3 -m bench.ranking --model qwen2.5-coder-1.5b --repeats 10 ;;
    # Where a ranking's milliseconds go: the same under cProfile, the costliest functions by own time.
    ranking15_profile) $t 300 python3 -m cProfile -s tottime -m bench.ranking --model qwen2.5-coder-1.5b --repeats 5 \
      2>&1 | head -70 ;;
    # The 0.5B at 1 to 64 requests on the dev apply cases (issue 35's levels), lookup with the prediction.
    concurrency05) $t 420 python3 -m bench.concurrency --levels 1 8 32 64 --cases 0 --modes "lookup K=16 +prediction" ;;
    # 64 requests alone, twice: the host phases of a full batch (redraft among them).
    concurrency05_64) for _ in 1 2; do $t 200 python3 -m bench.concurrency --levels 64 --cases 0 \
      --modes "lookup K=16 +prediction"; done ;;
    # The same with the level's load held: 4 requests a slot (n * 4 in all, n at a time).
    concurrency05_rounds) $t 420 python3 -m bench.concurrency --levels 32 64 --cases 0 --rounds 4 \
      --modes "lookup K=16 +prediction" ;;
    # Planning ahead on and off in turn (EDITAPPLY_PLAN_AHEAD), twice, at 8 to 64 requests.
    concurrency05_ahead) for a in 1 0 1 0; do EDITAPPLY_PLAN_AHEAD=$a $t 200 python3 -m bench.concurrency \
      --levels 8 32 64 --cases 0 --modes "lookup K=16 +prediction" && cp $RES/concurrency_cuda.json \
      $RES/concurrency05_ahead${a}_$(date +%s).json; done ;;
    # This tree's and the older one's (.old/) concurrency in turn, twice: an A/B within one lease.
    concurrency05_ab) for run in "" in_old "" in_old; do $run $t 200 python3 -m bench.concurrency --levels 8 32 64 \
      --cases 0 --modes "lookup K=16 +prediction"; done ;;
    # The same at 64 requests alone (the redraft's level), in turn, twice.
    concurrency05_ab64) for run in "" in_old "" in_old; do $run $t 200 python3 -m bench.concurrency --levels 64 \
      --cases 0 --modes "lookup K=16 +prediction"; done ;;
    # The ranking's cost on the lease's CPU (the GPU hidden from the engine), fp32, both presets.
    ranking_cpu) lscpu | grep -E "Model name|^CPU\(s\)"
      for m in 1.5b 0.5b; do EDITAPPLY_DEVICE=cpu $t 240 python3 -m bench.ranking --model qwen2.5-coder-$m --repeats 5; done ;;
    # The older tree's (.old/) concurrency and ranking, on the same lease.
    concurrency05_old) in_old $t 420 python3 -m bench.concurrency --levels 1 8 32 64 --cases 0 \
      --modes "lookup K=16 +prediction" ;;
    ranking05_old) in_old $t 300 python3 -m bench.ranking --model qwen2.5-coder-0.5b --repeats 10 ;;
    ranking15_old) in_old $t 300 python3 -m bench.ranking --model qwen2.5-coder-1.5b --repeats 10 ;;
    # Where a step's host time goes at 32 and 64 requests: the timed runs, then each under cProfile.
    # Verify blocks of 16 / 32 / 48 (issue 35's batch-1 goals): graph step times at 4k, planned ahead among them.
    stepsK) for s in 0.5b 1.5b; do $t 300 python3 -m bench.step_time --shape qwen2.5-coder-$s --contexts 4096 --no-hf \
      --no-eager --no-checks --k 16 32 48; done ;;
    # The 0.5B on the 60 dev cases at each block, twice (each K its own engine).
    applyK05) for r in 1 2; do $t 300 python3 -m bench.spec_decode --limit 0 --no-hf --no-vllm --plot $RES/applyK05_$r \
      --configs "lookup K=16 +prediction" "lookup K=32 +prediction" "lookup K=48 +prediction" \
      && cp $RES/spec_decode_cuda.json $RES/applyK05_$r.json; done ;;
    # The 1.5B the same way as its batch-1 figure (apply15_ab's bench), K=16 and 32 alternating.
    applyK15) for k in 16 32 16 32; do EDITAPPLY_VERIFY_TOKENS=$k $t 200 python3 -m bench.drafters --limit 60 \
      --max-tokens 2048 --workloads apply --drafters lookup; done ;;
    # The defaults (K=64, 32 a sequence in a crowded step, graphs of 16, 32, ... up to K) against K=16.
    # The step's switches (each variant in its own process): plain, PDL, the int8 lm_head, both; twice; K=16 and 64 at 4k.
    steps_fresh05|steps_fresh15) for i in 1 2; do $t 400 python3 -m bench.step_time --shape qwen2.5-coder-${1: -2:1}.${1: -1}b \
      --contexts 4096 --no-hf --no-eager --no-checks --k 16 64 --pdl off on --int8-head off on; done ;;
    # The 0.5B's default apply run with PDL and the int8 lm_head both off and both on, one process each, in turn, twice.
    apply05_switches) for v in 0 1 0 1; do EDITAPPLY_PDL=$v EDITAPPLY_INT8_HEAD=$v $t 200 python3 -m bench.spec_decode \
      --limit 0 --no-hf --no-vllm --plot $RES/apply05_sw$v --configs "lookup K=64 +prediction" \
      && cp $RES/spec_decode_cuda.json $RES/apply05_sw${v}_$(date +%s).json; done ;;
    # 64 requests at the default, the two switches both off and both on, the same way.
    concurrency_switches) for v in 0 1 0 1; do EDITAPPLY_PDL=$v EDITAPPLY_INT8_HEAD=$v $t 200 python3 -m bench.concurrency \
      --levels 64 --cases 0 --modes "lookup K=64 +prediction" && cp $RES/concurrency_cuda.json $RES/concurrency_sw${v}_$(date +%s).json; done ;;
    # The 0.5B's step with the int8 lm_head (a Triton GEMM in the graph) off and on: its time between kernels by pair.
    int8_gaps05) $t 300 python3 -m bench.step_time --shape qwen2.5-coder-0.5b --contexts 4096 --no-hf --no-eager \
      --no-checks --k 16 --int8-head off on --profile ;;
    stepsK64) for s in 0.5b 1.5b; do $t 300 python3 -m bench.step_time --shape qwen2.5-coder-$s --contexts 4096 --no-hf \
      --no-eager --no-checks --k 16 32 64; done ;;
    apply05_default) $t 300 python3 -m bench.spec_decode --limit 0 --no-hf --no-vllm --plot $RES/apply05_default \
      --configs "lookup K=16 +prediction" "lookup K=64 +prediction" && cp $RES/spec_decode_cuda.json $RES/apply05_default.json ;;
    concurrency_default) $t 300 python3 -m bench.concurrency --levels 1 8 32 64 --cases 0 --modes "lookup K=64 +prediction" ;;
    # The default against K=16, one process each, in turn, twice: issue 35's 64-request goal at the default.
    concurrency_default_ab) for k in 64 16 64 16; do $t 300 python3 -m bench.concurrency --levels 8 32 64 --cases 0 \
      --modes "lookup K=$k +prediction" && cp $RES/concurrency_cuda.json $RES/concurrency_k${k}_$(date +%s).json; done ;;
    # Plain decoding beside the default, one run: the same-output count is against plain (~3 min with the switch).
    equal_default_inv) EDITAPPLY_BATCH_INVARIANT=on $t 400 python3 -m bench.spec_decode --limit 0 --no-hf --no-vllm \
      --plot $RES/equal_default_inv --configs plain "lookup K=64 +prediction" && cp $RES/spec_decode_cuda.json $RES/equal_default_inv.json ;;
    apply15_default) for k in 16 64; do EDITAPPLY_VERIFY_TOKENS=$k $t 200 python3 -m bench.drafters --limit 60 \
      --max-tokens 2048 --workloads apply --drafters lookup; done ;;
    workloads15_default) for k in 16 64; do EDITAPPLY_VERIFY_TOKENS=$k $t 300 python3 -m bench.drafters --limit 4 \
      --max-tokens 256 --workloads instruction rag chat --drafters lookup; done ;;
    rag_default) for k in 16 64; do EDITAPPLY_VERIFY_TOKENS=$k $t 300 python3 -m bench.rag --questions 10; done ;;
    # Longer blocks still: the 1.5B at 48 and 64, the 0.5B at 64 beside 48.
    applyK15b) for k in 48 64; do EDITAPPLY_VERIFY_TOKENS=$k $t 200 python3 -m bench.drafters --limit 60 \
      --max-tokens 2048 --workloads apply --drafters lookup; done ;;
    applyK05b) $t 300 python3 -m bench.spec_decode --limit 0 --no-hf --no-vllm --plot $RES/applyK05b \
      --configs "lookup K=48 +prediction" "lookup K=64 +prediction" && cp $RES/spec_decode_cuda.json $RES/applyK05b.json ;;
    # One block per process, as concurrency05 runs K=16 (two engines in one process slow the host: concurrencyK).
    concurrencyK32) $t 300 python3 -m bench.concurrency --levels 1 8 32 64 --cases 0 --modes "lookup K=32 +prediction" ;;
    concurrencyK48) $t 300 python3 -m bench.concurrency --levels 1 8 32 64 --cases 0 --modes "lookup K=48 +prediction" ;;
    concurrencyK) $t 500 python3 -m bench.concurrency --levels 1 8 32 64 --cases 0 \
      --modes "lookup K=16 +prediction" "lookup K=32 +prediction" ;;
    # Batch-invariant bf16 at K=32: speculative against plain outputs over the 60 cases.
    equalK_inv) EDITAPPLY_BATCH_INVARIANT=on $t 540 python3 -m bench.spec_decode --limit 0 --no-hf --no-vllm \
      --plot $RES/equalK_inv --configs plain "lookup K=32 +prediction" && cp $RES/spec_decode_cuda.json $RES/equalK_inv.json ;;
    concurrency05_profile) $t 420 python3 -m bench.concurrency --levels 32 64 --cases 0 --modes "lookup K=16 +prediction" \
      --profile 30 ;;
    *) echo "unknown job $1"; return 2 ;;
  esac
}

case ${1:-} in
  start)
    mkdir -p $ROOT/parts $RES && echo "${2:-unknown}" > $ROOT/commit
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target $ROOT/site .whl/*.whl || exit 1
    if [ -d .old ]; then rm -rf $ROOT/old && cp -r .old $ROOT/old; fi
    nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader ;;
  part)
    mkdir -p $ROOT/parts/$3 && cp "$2"/part-* $ROOT/parts/$3/ && ls $ROOT/parts/$3 | tr '\n' ' ' ;;
  queue)
    shift
    src=$ROOT/src-$(date +%s) && mkdir -p $src && tar -cf - engine kernels prompts bench tests pyproject.toml | tar -xf - -C $src
    echo "${COMMIT:-$(cat $ROOT/commit)}" > $src/.commit
    setsid nohup bash -c "for j in $*; do flock $LOCK env SRC=$src FILLER=${FILLER:-0} bash $src/bench/device_session.sh _job \$j; done" \
      > /dev/null 2>&1 < /dev/null &
    echo "queued: $*" ;;
  _job)
    # A job queued as filler (FILLER=1) is skipped once `stop_filler` has stopped the filler.
    [ "${FILLER:-0}" = 1 ] && [ -e $ROOT/filler_stopped ] && { echo "$2: skipped (filler stopped)" >> $RES/done.log; exit 0; }
    echo "start $(date +%T)" >> $RES/$2.log
    job "$2" >> $RES/$2.log 2>&1
    echo "$2: exit $? at $(date +%T)" | tee -a $RES/$2.log >> $RES/done.log ;;
  stop_filler)  # skip the filler jobs not yet started, and end the one running
    touch $ROOT/filler_stopped; pkill -f "^python3 -m bench.(concurrency|rag)" ; echo "filler stopped" ;;
  collect)
    for _ in $(seq ${2:-0}); do flock -n $LOCK true && ! pgrep -f "device_session.sh _job" > /dev/null && break; sleep 1; done
    # Files past the return limit (16 MiB a file: the heads are 28 MB) come back in parts beside the tarball.
    mkdir -p "$OUT" && tar -czf "$OUT/results.tar.gz" --exclude='*.safetensors' -C $RES . && cat $RES/done.log 2>/dev/null
    for f in $RES/*.safetensors; do [ -f "$f" ] && split -b 15M -d "$f" "$OUT/$(basename $f .safetensors)-part-"; done
    ls -la $OUT
    pgrep -af "device_session.sh _job" | head -3 ;;
  *) sed -n 2,14p "$0"; exit 2 ;;
esac
