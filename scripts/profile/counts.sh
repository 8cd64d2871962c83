#!/bin/bash
# usage: scripts/profile/counts.sh TEST BIN|redis [fsync=none] [P=16] [N=200000] [threads=2]
#
# Per request of one redis-benchmark row (-c 50 -r 1000000 -P P -n N, TEST as in
# instructions.sh), counted on the server process with `perf stat`: system calls
# (raw_syscalls:sys_enter), context switches, heap allocations (uprobes on malloc, calloc and
# realloc of glibc, which prefixkv-server uses, and of libjemalloc, which Debian's redis-server
# uses), and the bytes its data directory grew by (the operation log under everysec/always, the
# AOF for Redis; periodic checkpoints are pushed out of the run with a one-hour interval). The
# uprobes trap on every allocation, so the run is slow and its rate means nothing: only the
# counts are printed. Syscalls and context switches depend on timing (how many requests one read
# brings), allocations and log bytes do not. Needs root for perf.
set -uf
. "$(dirname "$0")/common.sh"
# The allocation probes, once per boot.
if ! perf probe -l 2>/dev/null | grep -q 'probe_libc:malloc'; then
  for f in malloc calloc realloc; do perf probe -q -x /lib/x86_64-linux-gnu/libc.so.6 --add $f; done
fi
if ! perf probe -l 2>/dev/null | grep -q 'probe_libjemalloc:jemalloc'; then
  for f in malloc calloc realloc; do perf probe -q -x /usr/lib/x86_64-linux-gnu/libjemalloc.so.2 --add "je$f=$f"; done
fi
T=$1; BIN=$2; F=${3:-none}; P=${4:-16}; N=${5:-200000}; TH=${6:-2}
D=$(mktemp -d /tmp/row.XXXX)
PORT=$(free_port)
if [ "$BIN" = redis ]; then
  case $F in none) R="--appendonly no";; *) R="--appendonly yes --appendfsync $F";; esac
  redis-server --port $PORT --dir $D --save "" $R > $D.log 2>&1 & SP=$!
else
  $BIN --port $PORT --dir $D --appendfsync $F --threads $TH --checkpoint-interval 3600000 > $D.log 2>&1 & SP=$!
fi
wait_ready $PORT 100
ARGS=$(bench_args $PORT $T)
sync; b0=$(du -sb $D | cut -f1)
read u0 s0 < <(awk '{print $14, $15}' /proc/$SP/stat)
perf stat -x, -e raw_syscalls:sys_enter,context-switches,probe_libc:malloc,probe_libc:calloc,probe_libc:realloc,probe_libjemalloc:jemalloc,probe_libjemalloc:jecalloc,probe_libjemalloc:jerealloc -p $SP -o $D.stat & PS=$!
sleep 0.3
redis-benchmark -h 127.0.0.1 -p $PORT -c 50 -r 1000000 -n $N -P $P --csv $ARGS > $D.csv 2>&1
kill -INT $PS; wait $PS 2>/dev/null
read u1 s1 < <(awk '{print $14, $15}' /proc/$SP/stat)
sync; b1=$(du -sb $D | cut -f1)
kill $SP; wait $SP 2>/dev/null
python3 - "$T" "$BIN" "$F" "$P" "$N" "$D.stat" "$u0" "$s0" "$u1" "$s1" "$b0" "$b1" "$D.csv" <<'PY'
import sys,csv
t,b,f,p,n,st,u0,s0,u1,s1,b0,b1,cs=sys.argv[1:]
n=int(n); c={}
for line in open(st):
    parts=line.strip().split(",")
    if len(parts)>3 and parts[0] and parts[0][0].isdigit():
        c[parts[2]]=c.get(parts[2],0)+int(parts[0])
allocs=sum(v for k,v in c.items() if "malloc" in k or "calloc" in k or "realloc" in k)
rate=[r for r in csv.reader(open(cs)) if len(r)>1][-1][1]
who="redis" if b=="redis" else "prefixkv"
print(f"{t} {who} {f} P{p}: syscalls/req {c.get('raw_syscalls:sys_enter',0)/n:.3f} ctxsw/req {c.get('context-switches',0)/n:.3f} allocs/req {allocs/n:.2f} disk_bytes/req {(int(b1)-int(b0))/n:.1f}")
PY
rm -rf $D $D.log $D.stat $D.csv
