# Sourced by instructions.sh and counts.sh: what both do to start a server and drive one row of
# `prefixkv-bench server` at it.

# A free loopback port.
free_port() {
  python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'
}

# Waits until the server on port $1 answers PING, polling every 0.1 s at most $2 times.
wait_ready() {
  local i
  for i in $(seq "$2"); do redis-cli -p "$1" ping >/dev/null 2>&1 && return 0; sleep 0.1; done
  return 1
}

# The redis-benchmark arguments of test $2 against the server on port $1, as `prefixkv-bench
# server` runs them: evalsha is a rate limiter's INCR + EXPIRE script (loaded here), xadd one
# capped event stream, anything else a `-t` test. The caller expands the result unquoted with
# globbing off (`set -f`: XADD's `*`).
bench_args() {
  local sha
  case $2 in
    evalsha)
      sha=$(redis-cli -p "$1" script load "local n = redis.call('INCR', KEYS[1]) if n == 1 then redis.call('EXPIRE', KEYS[1], 60) end return n")
      echo "EVALSHA $sha 1 ratelimit:__rand_int__";;
    xadd) echo "XADD bench:events MAXLEN ~ 10000 * field value";;
    *) echo "-t $2";;
  esac
}
