#!/bin/bash
# usage: scripts/profile/instructions.sh TEST BIN [P=16] [fsync=none] [N2=100000]
#
# User-space instructions per request of a server, counted by valgrind's cachegrind, so that the
# figure does not depend on the machine's load (requests/s and CPU time do). BIN is a
# prefixkv-server binary (run with --threads 1: valgrind serialises threads anyway) or the word
# `redis` (redis-server from PATH). TEST is a redis-benchmark test (set, get, lpush, sadd, hset,
# zadd) or evalsha (a rate limiter's INCR + EXPIRE script) or xadd (one capped stream), as
# `prefixkv-bench server` runs them. Two runs, N1 = 20,000 and N1 + N2 requests of
# `redis-benchmark -c 50 -r 1000000 -P P`; the difference over N2 leaves out start-up and
# shutdown. Kernel time (send/recv, wake-ups) is not counted: see counts.sh for syscalls.
# Timer work (active expiry, checkpoint ticks) runs more often per request under valgrind's
# slowdown than at full speed, so it is slightly over-counted.
# OUTDIR (default /tmp/instructions-TEST-PID) keeps the cachegrind files:
#   cg_diff OUTDIR/cg-small.out OUTDIR/cg-big.out > d.out; cg_annotate --auto=no d.out
# shows where the N2 requests' instructions went. Needs valgrind, redis-benchmark, redis-cli.
set -uf
. "$(dirname "$0")/common.sh"
T=$1; BIN=$2; P=${3:-16}; F=${4:-none}; N2=${5:-100000}; N1=20000
OUT=${OUTDIR:-/tmp/instructions-$T-$$}; mkdir -p $OUT
one() {
  local N=$1 NAME=$2 D PORT SP ARGS
  D=$(mktemp -d /tmp/irs.XXXX)
  PORT=$(free_port)
  if [ "$BIN" = redis ]; then
    valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=$OUT/cg-$NAME.out redis-server --port $PORT --dir $D --save "" --appendonly no > $OUT/server-$NAME.log 2>&1 & SP=$!
  else
    valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=$OUT/cg-$NAME.out $BIN --port $PORT --dir $D --appendfsync $F --threads 1 > $OUT/server-$NAME.log 2>&1 & SP=$!
  fi
  wait_ready $PORT 600
  ARGS=$(bench_args $PORT $T)
  redis-benchmark -h 127.0.0.1 -p $PORT -c 50 -r 1000000 -n $N -P $P --csv $ARGS > $OUT/bench-$NAME.csv 2>&1
  redis-cli -p $PORT shutdown nosave >/dev/null 2>&1 || kill $SP
  for i in $(seq 300); do kill -0 $SP 2>/dev/null || break; sleep 0.1; done
  kill -9 $SP 2>/dev/null; wait $SP 2>/dev/null; rm -rf $D
  grep -m1 '^summary:' $OUT/cg-$NAME.out | awk '{print $2}'
}
a=$(one $N1 small); b=$(one $((N1+N2)) big)
echo "$T P=$P $F: $(( (b-a)/N2 )) instructions/request (Ir $a for $N1, $b for $((N1+N2)))"
