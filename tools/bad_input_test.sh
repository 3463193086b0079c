#!/usr/bin/env bash
# Bad input never aborts (issue 21): runs the real train, collective_bench, launch,
# mesh and schedule binaries on a table of bad command lines: zero, negative, huge,
# overflowing and non-numeric values, unknown enum values and flags, stray
# arguments, unwritable outputs, sizes that could not be allocated. Every case must
#   - exit 2 (usage error) or 1 (runtime failure), as tools/docs/failures.md says;
#   - print exactly one line on stderr, starting with "<tool>: ";
#   - name the flag or the value in it (the case's expected substring);
#   - not abort, dump core or say "terminate called" (a std::bad_alloc, a
#     StatusOr::value() of an error), nor trip a sanitizer;
#   - end within a few seconds (checked before any rank or mpirun starts).
set -uo pipefail
TRAIN="$1" BENCH="$2" LAUNCH="$3" MESH="$4" SCHEDULE="$5"
TMP="$(mktemp -d "${TEST_TMPDIR:-/tmp}/bad_input.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
# Each case's deadline, in seconds. Failing fast is the point: the slowest checks
# here run in well under a second, also under ASan.
DEADLINE=15
# Cases run this many at a time: most of a case is a process starting (ASan's
# shadow memory), which overlaps well even on two cores.
LANES=4
cases=0

# run_case N TOOL_NAME EXIT SUBSTRING -- BINARY ARGS...: runs case N, writes what is
# wrong with it (nothing when it passes) to $TMP/result.N.
run_case() {
  local n="$1" tool="$2" want_exit="$3" want="$4"
  shift 5
  local start=$SECONDS status=0
  timeout -k 5 "$DEADLINE" "$@" >/dev/null 2>"$TMP/err.$n" </dev/null || status=$?
  local took=$((SECONDS - start)) err problem=""
  err="$(<"$TMP/err.$n")"  # bash builtins only below: the table runs under ASan in CI
  if [[ "$status" == 124 || "$status" == 137 ]]; then
    problem="did not end within ${DEADLINE}s"
  elif [[ "$status" != "$want_exit" ]]; then
    problem="exited $status, expected $want_exit"
  elif [[ -z "$err" || "$err" == *$'\n'* ]]; then
    problem="stderr is not exactly one line"
  elif [[ "$err" != "$tool: "* ]]; then
    problem="stderr does not start with '$tool: '"
  elif [[ "$err" == "$tool: $tool: "* ]]; then
    problem="doubled prefix"
  elif [[ "$err" =~ (INVALID_ARGUMENT|RESOURCE_EXHAUSTED|NOT_FOUND|UNAVAILABLE|INTERNAL): ]]; then
    problem="a StatusCode prefix in the message"
  elif [[ "$err" != *"$want"* ]]; then
    problem="stderr lacks '$want'"
  fi
  shopt -s nocasematch
  if [[ "$err" =~ terminate\ called|core\ dumped|aborted|sanitizer|bad_alloc|runtime\ error ]]; then
    problem="${problem:+$problem; }aborted or tripped a sanitizer"
  fi
  shopt -u nocasematch
  if [[ -n "$problem" ]]; then
    printf 'FAIL: %s: %s (%ss)\n    stderr: %s\n' "${*#"${1%/*}/"}" "$problem" "$took" \
      "${err:0:2000}" >"$TMP/result.$n"
  fi
}

# expect TOOL_NAME EXIT SUBSTRING -- BINARY ARGS...: one case of the table, started
# in the background once a lane is free.
running=0
expect() {
  cases=$((cases + 1))
  if ((running >= LANES)); then
    wait -n
    running=$((running - 1))
  fi
  run_case "$cases" "$@" &
  running=$((running + 1))
}

# Paths that cannot be written: a missing directory, a directory, a FIFO nobody
# reads, a path under a regular file.
mkdir -p "$TMP/dir"
touch "$TMP/file"
mkfifo "$TMP/fifo"
NODIR="$TMP/missing/out.json"

# --- train: every size flag that multiplies into a byte count is checked first.
T=(-- "$TRAIN" --nocompare_reference)
expect train 2 "--vocab 1000000000000" "${T[@]}" --vocab=1000000000000
expect train 2 "--seq_len 1000000000000" "${T[@]}" --seq_len=1000000000000
expect train 2 "--micro_batch 1000000000000" "${T[@]}" --micro_batch=1000000000000
expect train 2 "--microbatches 1000000000000" "${T[@]}" --microbatches=1000000000000
expect train 2 "--hidden 4000000000 x --hidden 4000000000 overflows int64" "${T[@]}" --hidden=4000000000
expect train 2 "--hidden 9223372036854775807 overflows int64" "${T[@]}" --hidden=9223372036854775807
expect train 2 "--hidden=99999999999999999999 is not an integer" "${T[@]}" --hidden=99999999999999999999
expect train 2 "--vocab=abc is not an integer" "${T[@]}" --vocab=abc
expect train 2 "vocab 1 must be >= 2" "${T[@]}" --vocab=1
expect train 2 "vocab -5 must be >= 2" "${T[@]}" --vocab=-5
# Checkpoints, restarts, the schedule, evaluation, clipping, metrics (issue 22).
expect train 2 "--checkpoint_every -1 must be >= 0" "${T[@]}" --checkpoint_every=-1 --checkpoint_dir=/tmp
expect train 2 "--checkpoint_every 5 needs --checkpoint_dir" "${T[@]}" --checkpoint_every=5
expect train 2 "--keep_checkpoints 0 must be >= 1" "${T[@]}" --keep_checkpoints=0
expect train 2 "--resume needs --checkpoint_dir" "${T[@]}" --resume
expect train 2 "--resume_from /nonexistent/ckpt: checkpoint: no checkpoint in" "${T[@]}" --resume_from=/nonexistent/ckpt
expect train 2 "--max_restarts -1 is not in [0, 100]" "${T[@]}" --max_restarts=-1
expect train 2 "--elastic_dp needs --max_restarts" "${T[@]}" --elastic_dp
expect train 2 "--max_restarts 1 needs --checkpoint_dir" "${T[@]}" --max_restarts=1
expect train 2 "--max_restarts is for --transport shm" "${T[@]}" --max_restarts=1 --checkpoint_dir=/tmp
expect train 2 "--checkpoint_dir /nonexistent/a/b: its parent /nonexistent/a" "${T[@]}" --checkpoint_dir=/nonexistent/a/b
expect train 2 "--eval_every -1 and --steps 100: must be >= 0" "${T[@]}" --eval_every=-1
expect train 2 "--clip_grad_norm nan must be a finite number" "${T[@]}" --clip_grad_norm=nan
expect train 2 "--warmup_steps -1 must be in [0, --steps 100]" "${T[@]}" --warmup_steps=-1
expect train 2 "--lr_min 1 must be in [0, --lr 0.003]" "${T[@]}" --lr_min=1
expect train 2 "--lr_min=abc is not a number" "${T[@]}" --lr_min=abc
expect train 2 "--metrics=/nonexistent/m.jsonl: cannot open for writing" "${T[@]}" --metrics=/nonexistent/m.jsonl
expect train 2 "--plot=/nonexistent/p.svg: cannot open for writing" "${T[@]}" --plot=/nonexistent/p.svg
expect train 2 "seq_len 0 must be >= 1" "${T[@]}" --seq_len=0
# --data: text files, checked before any rank starts.
: > "$TMP/empty.txt"
mkfifo "$TMP/fifo.txt"
head -c 4000 /dev/urandom > "$TMP/text.txt"
expect train 1 "--data: ByteCorpus: cannot open $TMP/missing.txt: No such file" "${T[@]}" --data="$TMP/missing.txt"
expect train 2 "--data: ByteCorpus: $TMP/empty.txt is empty" "${T[@]}" --data="$TMP/empty.txt"
expect train 2 "is not a regular file" "${T[@]}" --data="$TMP/fifo.txt"
expect train 2 "is not a regular file" "${T[@]}" --data="$TMP"
expect train 2 "--data is byte-level text, which needs --vocab 256, not 64" "${T[@]}" --data="$TMP/text.txt" --vocab=64
expect train 2 "eval_fraction 0.9 is outside [0, 0.5]" "${T[@]}" --data="$TMP/text.txt" --eval_fraction=0.9
expect train 2 "each part needs at least one sequence" "${T[@]}" --data="$TMP/text.txt" --seq_len=3999
expect train 2 "hidden 0 must be >= 1" "${T[@]}" --hidden=0
expect train 2 "heads 0 must be >= 1" "${T[@]}" --heads=0
expect train 2 "heads 3 must divide hidden 64" "${T[@]}" --heads=3 --tp=1
expect train 2 "--layers 0 must be >= 1" "${T[@]}" --layers=0
expect train 2 "--layers -1 must be >= 1" "${T[@]}" --layers=-1
expect train 2 "--dp 0 --pp 2 --cp 1 --tp 2: each must be >= 1" "${T[@]}" --dp=0
expect train 2 "--dp -1 --pp 2 --cp 1 --tp 2: each must be >= 1" "${T[@]}" --dp=-1
expect train 2 "--dp 2 --pp 2 --cp 0 --tp 2: each must be >= 1" "${T[@]}" --cp=0
expect train 2 "--seq_len 3 is shorter than --cp 4: every cp rank needs a position" "${T[@]}" --cp=4 --seq_len=3
expect train 2 "--cp_layout ring is not zigzag or contiguous" "${T[@]}" --cp=2 --cp_layout=ring
expect train 2 "--cp_comm x is not ring or a2a" "${T[@]}" --cp=2 --cp_comm=x
expect train 2 "--cp_comm a2a needs --cp 3 to divide each tp rank's 2 heads (--heads 4 / --tp 2); use --cp_comm ring" "${T[@]}" --cp=3 --cp_comm=a2a
expect train 2 "--attention_gflops 0 must be > 0" "${T[@]}" --cp=2 --attention_gflops=0
expect train 2 "--cost_model /nonexistent/model.txt: " "${T[@]}" --cp=2 --cost_model=/nonexistent/model.txt
expect train 2 "--attention_gflops is for --cp_comm=auto, not --cp_comm=ring" "${T[@]}" --cp=2 --cp_comm=ring --attention_gflops=9
expect train 2 "= 1200 thread ranks; at most 64" "${T[@]}" --dp=300
expect train 2 "--dp 300 x --pp 2 x --cp 1 x --tp 2 = 1200 processes over shm; at most 64" "${T[@]}" --dp=300 --transport=shm
expect train 2 "= 1200 processes over mpi; at most 64" "${T[@]}" --dp=300 --transport=mpi
expect train 2 "= more than int64 holds thread ranks" "${T[@]}" --dp=2147483647 --tp=2147483647 --pp=2147483647
expect train 2 "--dp=3000000000 is not an integer (32-bit)" "${T[@]}" --dp=3000000000
expect train 2 "--tp=abc is not an integer" "${T[@]}" --tp=abc
expect train 2 "--micro_batch 0 and --steps 1 must be >= 1" "${T[@]}" --steps=1 --micro_batch=0
expect train 2 "--steps 0 must be >= 1" "${T[@]}" --steps=0
expect train 2 "--steps -3 must be >= 1" "${T[@]}" --steps=-3
expect train 2 "--microbatches 0 is fewer than --pp 2" "${T[@]}" --microbatches=0
expect train 2 "--zero -1 must be 0, 1, 2 or 3" "${T[@]}" --zero=-1
expect train 2 "--zero 9 must be 0, 1, 2 or 3" "${T[@]}" --zero=9
expect train 2 "--lr -1 must be a finite number >= 0" "${T[@]}" --lr=-1
expect train 2 "--lr nan must be a finite number" "${T[@]}" --lr=nan
expect train 2 "--lr inf must be a finite number" "${T[@]}" --lr=1e300
expect train 2 "--lr=fast is not a number" "${T[@]}" --lr=fast
expect train 2 "--adam_eps 0 must be a finite number > 0" "${T[@]}" --adam_eps=0
expect train 2 "--seed=-1 is not a non-negative integer" "${T[@]}" --seed=-1
expect train 2 "--schedule: " "${T[@]}" --schedule=2f2b
expect train 2 "--offload disk is not none, cpu, nvme or gpu" "${T[@]}" --offload=disk
expect train 2 "--device tpu is not cpu or cuda" "${T[@]}" --device=tpu
expect train 2 "--device cuda needs a train built with --config=cuda" "${T[@]}" --device=cuda
expect train 2 "--offload gpu needs a train built with --config=cuda" "${T[@]}" --offload=gpu
expect train 2 "--reshard blocks is not auto, step or block" "${T[@]}" --reshard=blocks
expect train 2 "--reshard block needs --zero 1, 2 or 3" "${T[@]}" --reshard=block --zero=0
expect train 2 "--defer_reduce_scatter needs --reshard block, the default at --zero 3" "${T[@]}" --zero=3 --reshard=step --defer_reduce_scatter
expect train 2 "--offload_params disk is not none, cpu or nvme" "${T[@]}" --offload_params=disk
expect train 2 "--offload_params nvme needs --zero 3 (zero 1 keeps whole parameters" "${T[@]}" --zero=1 --offload_params=nvme
expect train 2 "--offload_grads disk is not none, cpu or nvme" "${T[@]}" --offload_grads=disk
expect train 2 "--offload_grads nvme needs --zero 2 or 3 (zero 1 keeps the whole gradient" "${T[@]}" --zero=1 --offload_grads=nvme
expect train 2 "--param_budget -5 is negative" "${T[@]}" --param_budget=-5
expect train 2 "--prefetch_depth 65 is not in [0, 64]" "${T[@]}" --prefetch_depth=65
expect train 2 "--persist_below: 'lots' is not a byte size" "${T[@]}" --persist_below=lots
expect train 2 "--grad_bucket: '-1M' is not a byte size" "${T[@]}" --grad_bucket=-1M
expect train 2 "--threads_per_rank -1 is not in [0, 1024]" "${T[@]}" --threads_per_rank=-1
expect train 2 "--threads_per_rank 1024 with 8 ranks on this host needs 8192 CPUs" "${T[@]}" --threads_per_rank=1024
expect train 2 "--offload_config: offload: unknown key 'bogus'" "${T[@]}" --offload_config=bogus=1
expect train 2 "--offload_config: offload: host_budget is 0, but parameters (nvme)" "${T[@]}" --offload_config=params=nvme
expect train 2 "--offload_config replaces --offload: give one of them" "${T[@]}" --offload=nvme --offload_config=optimizer=cpu,host_budget=1G
expect train 2 "--offload_config: compression=lz4: the ZeRO engine stores its shards uncompressed" "${T[@]}" --offload_config=optimizer=cpu,params=cpu,host_budget=1G,compression=lz4
expect train 2 "--param_budget bounds zero 3's gathered parameters; zero 2 gathers none" "${T[@]}" --zero=2 --param_budget=100
expect train 2 "--dtype f8 is not f32 or bf16" "${T[@]}" --dtype=f8
expect train 2 "--recompute some is not none or full" "${T[@]}" --recompute=some
expect train 2 "--transport pigeon is not threads, shm or mpi" "${T[@]}" --transport=pigeon
expect train 2 "--job_id: job id \"a.b\"" "${T[@]}" --transport=shm --job_id=a.b
expect train 2 "--nvme_dir: $TMP/missing: No such file or directory" "${T[@]}" --offload=nvme --nvme_dir="$TMP/missing"
expect train 2 "--nvme_dir: $TMP/file is not a directory" "${T[@]}" --offload=nvme --nvme_dir="$TMP/file"
expect train 2 "unexpected argument \"stray\"" "${T[@]}" stray
expect train 2 "unexpected argument \"stray\"" "${T[@]}" --steps=2 -- stray
expect train 2 "unknown flag --no_such_flag" "${T[@]}" --no_such_flag=1
expect train 2 "--compare_reference=maybe is not true or false" "${T[@]}" --compare_reference=maybe
expect train 2 "--nocompare_reference takes no value" "${T[@]}" --nocompare_reference=1
expect train 2 "--steps needs a value" "${T[@]}" --steps
# Outputs are opened before the first step (with errno's text), for every transport.
expect train 2 "--trace=$NODIR: cannot open for writing: No such file or directory" "${T[@]}" --trace="$NODIR"
expect train 2 "--summary_json=$TMP/dir: cannot open for writing: Is a directory" "${T[@]}" --summary_json="$TMP/dir"
expect train 2 "--trace=$TMP/fifo: cannot open for writing: No such device or address" "${T[@]}" --trace="$TMP/fifo"
expect train 2 "--summary_json=$TMP/file/x: cannot open for writing: Not a directory" "${T[@]}" --summary_json="$TMP/file/x"
expect train 2 "--plan chooses --dp; leave it out" "${T[@]}" --plan=2 --dp=2
expect train 2 "--plan is for --transport threads" "${T[@]}" --plan=2 --transport=shm
expect train 2 "--global_batch and --plan_calibration go with --plan" "${T[@]}" --global_batch=8
expect train 2 "no configuration of 3 devices runs this model and batch" "${T[@]}" --plan=3 --global_batch=1
expect train 2 "--trace=$NODIR: cannot open for writing" "${T[@]}" --transport=shm --trace="$NODIR"
expect train 2 "--summary_json=$NODIR: cannot open for writing" "${T[@]}" --transport=mpi --summary_json="$NODIR"

# --- collective_bench: every flag is checked before a thread, process or mpirun starts.
B=(-- "$BENCH")
expect collective_bench 2 "--max_bytes=67108864 is smaller than --min_bytes=1099511627776" "${B[@]}" --min_bytes=1T
expect collective_bench 2 "--save_cost_model=m.txt saves what --calibrate measures; add --calibrate" "${B[@]}" --save_cost_model=m.txt
expect collective_bench 2 "--cost_model_cache=/c is where --auto_calibrate keeps its models; it is off" "${B[@]}" --noauto_calibrate --cost_model_cache=/c
expect collective_bench 2 "--cost_model_calibrations=0: the cache merges 1 calibration or more" "${B[@]}" --cost_model_calibrations=0
expect collective_bench 2 "--calibrate measures a cost model; --cost_model=m.txt loads one" "${B[@]}" --calibrate --cost_model=m.txt
expect collective_bench 2 "--max_bytes=1099511627776: an input and an output buffer on each of 2 ranks" "${B[@]}" --max_bytes=1T
expect collective_bench 2 "--max_bytes=1099511627776: an input and an output buffer on each of 4 ranks" "${B[@]}" --transport=shm --ranks=4 --max_bytes=1T
expect collective_bench 2 "--max_bytes=1099511627776: an input and an output buffer on each of 2 ranks" "${B[@]}" --transport=mpi --ranks=4 --ranks_per_node=2 --max_bytes=1T
expect collective_bench 2 "'99999999999999999999' is not a byte size" "${B[@]}" --max_bytes=99999999999999999999
expect collective_bench 2 "--min_time=soon is not a duration like 0.2s or 500ms" "${B[@]}" --min_time=soon
expect collective_bench 2 "--min_time=120s: must be 0..60s" "${B[@]}" --min_time=2m
expect collective_bench 2 "--min_bytes=-1: '-1' is not a byte size" "${B[@]}" --min_bytes=-1
expect collective_bench 2 "--min_bytes=lots: 'lots' is not a byte size" "${B[@]}" --min_bytes=lots
expect collective_bench 2 "--min_bytes=0: the smallest size must be at least 1 byte" "${B[@]}" --min_bytes=0
expect collective_bench 2 "--transport=pigeon is not inproc, shm, mpi or gloo" "${B[@]}" --transport=pigeon
expect collective_bench 2 "--op=foo: unknown collective \"foo\"" "${B[@]}" --op=foo
expect collective_bench 2 "--algo=foo: " "${B[@]}" --algo=foo
expect collective_bench 2 "--dtype=f3: " "${B[@]}" --dtype=f3
expect collective_bench 2 "--redop=mean: " "${B[@]}" --redop=mean
expect collective_bench 2 "--ranks=0 is not in [1, 1024]" "${B[@]}" --ranks=0
expect collective_bench 2 "--ranks=-3 is not in [1, 1024]" "${B[@]}" --ranks=-3
expect collective_bench 2 "--ranks=5000 is not in [1, 1024]" "${B[@]}" --ranks=5000
expect collective_bench 2 "--ranks=99999999999 is not an integer (32-bit)" "${B[@]}" --ranks=99999999999
expect collective_bench 2 "--ranks=two is not an integer" "${B[@]}" --ranks=two
expect collective_bench 2 "--ranks=1000 is not in [1, 256] (the shm transport's limit)" "${B[@]}" --transport=shm --ranks=1000
expect collective_bench 2 "--iters=0 must be >= 1" "${B[@]}" --iters=0
expect collective_bench 2 "--iters=-1 must be >= 1" "${B[@]}" --iters=-1
expect collective_bench 2 "--warmup=-1 must be >= 0" "${B[@]}" --warmup=-1
expect collective_bench 2 "--step_factor=1 must be >= 2" "${B[@]}" --step_factor=1
expect collective_bench 2 "--step_factor=0 must be >= 2" "${B[@]}" --step_factor=0
expect collective_bench 2 "--root=5 is not a rank of 2 (0 to 1)" "${B[@]}" --root=5 --op=broadcast
expect collective_bench 2 "--root=-1 is not a rank of 2" "${B[@]}" --root=-1
expect collective_bench 2 "--timeout=0 must be positive and finite" "${B[@]}" --timeout=0
expect collective_bench 2 "--timeout=-5s must be positive and finite" "${B[@]}" --timeout=-5s
expect collective_bench 2 "--timeout=soon is not a duration" "${B[@]}" --timeout=soon
expect collective_bench 2 "--chunk_bytes=0 must be at least 1 byte" "${B[@]}" --chunk_bytes=0
expect collective_bench 2 "--ranks_per_node=-1 must be >= 0" "${B[@]}" --ranks_per_node=-1
expect collective_bench 2 "--shm_copy=pigeon is not auto, cma or staged" "${B[@]}" --transport=shm --shm_copy=pigeon
expect collective_bench 2 "--shm_staging_bytes=1K (1024 bytes) is not in [65536, 268435456]" "${B[@]}" --transport=shm --shm_staging_bytes=1K
expect collective_bench 2 "--shm_staging_bytes=1T (1099511627776 bytes) is not in" "${B[@]}" --transport=shm --shm_staging_bytes=1T
expect collective_bench 2 "--node_transport=foo is not auto, none or shm" "${B[@]}" --transport=mpi --node_transport=foo
expect collective_bench 2 "--node_transport=shm is for --transport=mpi or gloo, not inproc" "${B[@]}" --node_transport=shm
expect collective_bench 2 "--route_by_host=false is for --transport=gloo with its hosts found (--node_transport=auto or shm), not --transport=mpi --node_transport=auto" "${B[@]}" --transport=mpi --route_by_host=false
expect collective_bench 2 "--route_by_host=false is for --transport=gloo with its hosts found (--node_transport=auto or shm), not --transport=gloo --node_transport=none" "${B[@]}" --transport=gloo --node_transport=none --route_by_host=false
expect collective_bench 2 "--cost_model=$TMP/missing.txt: " "${B[@]}" --cost_model="$TMP/missing.txt"
expect collective_bench 2 "--check=sometimes is not true or false" "${B[@]}" --check=sometimes
expect collective_bench 2 "unexpected argument \"stray\"" "${B[@]}" stray
expect collective_bench 2 "unknown flag --bogus" "${B[@]}" --bogus=1

# --- launch: bad input is 2; launch still returns 128+n for a rank killed by signal n
# (launch_cli_test).
L=(-- "$LAUNCH")
expect launch 2 "number of ranks 0 is outside [1, 1024]" "${L[@]}" -n 0 -- true
expect launch 2 "number of ranks -4 is outside [1, 1024]" "${L[@]}" -n -4 -- true
expect launch 2 "number of ranks 99999999999 is outside [1, 1024]" "${L[@]}" -n 99999999999 -- true
expect launch 2 "-n many is not a number of ranks" "${L[@]}" -n many -- true
expect launch 2 "--timeout=soon is not a duration" "${L[@]}" --timeout=soon -- true
expect launch 2 "timeout -1s is negative" "${L[@]}" --timeout=-1s -- true
expect launch 2 "--grace=x is not a duration" "${L[@]}" --grace=x -- true
expect launch 2 "job id \"a/b\" must be 1 to 64 characters" "${L[@]}" --job_id=a/b -- true
expect launch 2 "no PROGRAM given" "${L[@]}" -n 2
expect launch 2 "program \"loom-no-such-program\" not found" "${L[@]}" -n 1 -- loom-no-such-program
expect launch 2 "$TMP/file" "${L[@]}" -n 1 -- "$TMP/file"
expect launch 2 "unknown flag --bogus" "${L[@]}" --bogus -- true

# --- mesh: a layout tool, so every failure is its input's.
M=(-- "$MESH")
expect mesh 2 "--shape is required" "${M[@]}"
expect mesh 2 "dimension \"dp\" has size 0" "${M[@]}" --shape=dp=0
expect mesh 2 "dimension \"dp\" has size -2" "${M[@]}" --shape=dp=-2
expect mesh 2 "\"dp=abc\"" "${M[@]}" --shape=dp=abc
expect mesh 2 "\"dp=99999999999999999999\"" "${M[@]}" --shape=dp=99999999999999999999
expect mesh 2 "has more than 2^31 ranks" "${M[@]}" --shape=dp=4000000000,tp=4000000000
expect mesh 2 "rank 8 is outside" "${M[@]}" --shape=dp=2,tp=4 --rank=8
expect mesh 2 "--rank=abc is not an integer" "${M[@]}" --shape=dp=2 --rank=abc
expect mesh 2 "ranks_per_node=-1" "${M[@]}" --shape=dp=2 --ranks_per_node=-1
expect mesh 2 "--format=yaml is not table or json" "${M[@]}" --shape=dp=2 --format=yaml
expect mesh 2 "unexpected argument \"stray\"" "${M[@]}" --shape=dp=2 stray

# --- schedule: bad input 2; a schedule that fails verification 1.
S=(-- "$SCHEDULE")
expect schedule 2 "--ranks=0 must be >= 1" "${S[@]}" --schedule=1f1b --ranks=0
expect schedule 2 "--ranks=-2 must be >= 1" "${S[@]}" --schedule=1f1b --ranks=-2
expect schedule 2 "--ranks=abc is not an integer" "${S[@]}" --schedule=1f1b --ranks=abc
expect schedule 2 "--microbatches=0 must be >= 1" "${S[@]}" --schedule=1f1b --microbatches=0
expect schedule 2 "--virtual=-1 must be >= 1" "${S[@]}" --schedule=interleaved_1f1b --virtual=-1
expect schedule 2 "make up to 4000000000000000000 actions; at most 10000000" "${S[@]}" --schedule=1f1b --ranks=1000000000 --microbatches=1000000000
expect schedule 2 "--ranks 9223372036854775807 x --microbatches 9223372036854775807" "${S[@]}" --schedule=1f1b --ranks=9223372036854775807 --microbatches=9223372036854775807
expect schedule 2 "--schedule=2f2b is not gpipe" "${S[@]}" --schedule=2f2b
expect schedule 2 "--format=yaml is not table, csv, chrome or svg" "${S[@]}" --schedule=1f1b --format=yaml
expect schedule 2 "--costs: F=-1 is not a finite number >= 0" "${S[@]}" --schedule=1f1b --costs=F=-1
expect schedule 2 "--svg_width: " "${S[@]}" --schedule=1f1b --format=svg --svg_width=0
expect schedule 2 "cannot read --load=$TMP/missing.csv" "${S[@]}" --load="$TMP/missing.csv"
expect schedule 2 "--out=$TMP/dir: cannot open for writing: Is a directory" "${S[@]}" --schedule=1f1b --out="$TMP/dir"
expect schedule 2 "--out=$NODIR: cannot open for writing: No such file or directory" "${S[@]}" --schedule=1f1b --out="$NODIR"
expect schedule 2 "unexpected argument \"stray\"" "${S[@]}" --schedule=1f1b stray
printf '0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1\n1RECV_F0,1F0,1B0,1SEND_B0,1RECV_F1,1F1,1B1,1SEND_B1\n' \
  >"$TMP/deadlock.csv"
expect schedule 1 "verification failed: deadlock" "${S[@]}" --load="$TMP/deadlock.csv" --verify

wait
[[ -e "$TMP/missing" ]] && echo "FAIL: a failed check created $TMP/missing" >"$TMP/result.created"
failures=0
for result in "$TMP"/result.*; do
  [[ -e "$result" ]] || continue
  cat "$result"
  failures=$((failures + 1))
done
echo "$cases cases, $failures failed"
[[ "$failures" == 0 ]] || exit 1
echo PASS
