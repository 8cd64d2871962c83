//! Differential tests: the same Lua chunks on redis-server 7.0 (`EVAL`) and on an mlua VM with
//! `prefixkv_lua::load_libraries`, results rendered to strings and compared, errors included
//! (every case runs under `pcall`, so error texts are compared too).
/// The harness: a redis-server on a free port, an mlua VM, and the comparison.
mod common {
    // Test support: a real redis-server 7.0 and an mlua VM with `load_libraries`, running the same
    // Lua chunk and rendering its results as one comparable string.

    use std::io::{BufRead, BufReader, Read, Write};
    use std::net::TcpStream;
    use std::process::{Child, Command, Stdio};
    use std::time::{Duration, Instant};

    use prefixkv_lua::mlua::{Lua, LuaOptions, StdLib};

    /// Renders any number of Lua values as a string: type-tagged, numbers with `%.17g`, strings
    /// with `%q`, tables with sorted keys, `cjson.null` as NULL. One line, so that positions in
    /// error messages ("user_script:1:") are the same on both sides.
    pub const PRELUDE: &str = "local function S(v, d) local t = type(v) \
    if t == 'string' then return string.format('%q', v) \
    elseif t == 'number' then return string.format('%.17g', v) \
    elseif t == 'boolean' then return tostring(v) \
    elseif t == 'nil' then return 'nil' \
    elseif t == 'table' then if d > 40 then return '{...}' end \
    local ks = {} for k in pairs(v) do ks[#ks + 1] = k end \
    table.sort(ks, function(a, b) return S(a, 99) < S(b, 99) end) \
    local o = {} for _, k in ipairs(ks) do o[#o + 1] = '[' .. S(k, d + 1) .. ']=' .. S(v[k], d + 1) end \
    return '{' .. table.concat(o, ',') .. '}' \
    elseif t == 'userdata' and v == cjson.null then return 'NULL' \
    else return t end end \
    local function R(...) local o = {} for i = 1, select('#', ...) do o[i] = S((select(i, ...)), 0) end \
    return table.concat(o, ' ') end ";

    /// The whole script for one case: `body` runs inside `pcall(function() ... end)`.
    pub fn script(body: &str) -> String {
        assert!(!body.contains('\n'), "cases are one line: {body}");
        format!("{PRELUDE}return R(pcall(function() {body} end))")
    }

    /// A redis-server on a free loopback port in a temporary directory, killed on drop.
    pub struct Redis {
        child: Child,
        conn: BufReader<TcpStream>,
        _dir: tempfile::TempDir,
    }

    /// A connection to `port` that answered PING with PONG; `None` on any I/O error (not yet
    /// listening, or a listener that is not a redis-server).
    fn ping(port: u16) -> Option<BufReader<TcpStream>> {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .ok()?;
        stream.write_all(b"*1\r\n$4\r\nPING\r\n").ok()?;
        let mut conn = BufReader::new(stream);
        let mut line = String::new();
        conn.read_line(&mut line).ok()?;
        (line == "+PONG\r\n").then_some(conn)
    }

    /// One RESP2 reply.
    #[derive(Debug, PartialEq)]
    pub enum Reply {
        Status(String),
        Error(String),
        Int(i64),
        Bulk(Option<Vec<u8>>),
        Array(Option<Vec<Reply>>),
    }

    impl Redis {
        /// Starts redis-server (fails, never skips, when it is missing).
        pub fn start() -> Redis {
            let dir = tempfile::tempdir().unwrap();
            for _ in 0..5 {
                let port = prefixkv_testkit::net::free_port();
                let mut child = Command::new("redis-server")
                    .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                    .args(["--save", "", "--appendonly", "no"])
                    .arg("--dir")
                    .arg(dir.path())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("cannot run redis-server (/usr/bin/redis-server 7.0)");
                let deadline = Instant::now() + Duration::from_secs(30);
                while Instant::now() < deadline {
                    if let Ok(Some(_)) = child.try_wait() {
                        break; // it could not bind the port: another one
                    }
                    if let Some(conn) = ping(port) {
                        // Our child still runs, so the listener that answered is ours (had the
                        // port been taken, redis-server would have exited on its failed bind).
                        std::thread::sleep(Duration::from_millis(50));
                        if let Ok(None) = child.try_wait() {
                            return Redis {
                                child,
                                conn,
                                _dir: dir,
                            };
                        }
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                let _ = child.kill();
                let _ = child.wait();
            }
            panic!("redis-server did not start");
        }

        /// Sends one command and reads its reply.
        pub fn command(&mut self, args: &[&[u8]]) -> Reply {
            let mut out = format!("*{}\r\n", args.len()).into_bytes();
            for a in args {
                out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
                out.extend_from_slice(a);
                out.extend_from_slice(b"\r\n");
            }
            self.conn.get_mut().write_all(&out).unwrap();
            self.reply()
        }

        fn line(&mut self) -> String {
            let mut l = String::new();
            self.conn.read_line(&mut l).unwrap();
            l.trim_end_matches("\r\n").to_string()
        }

        fn reply(&mut self) -> Reply {
            let l = self.line();
            let (kind, rest) = l.split_at(1);
            match kind {
                "+" => Reply::Status(rest.into()),
                "-" => Reply::Error(rest.into()),
                ":" => Reply::Int(rest.parse().unwrap()),
                "$" => {
                    let n: i64 = rest.parse().unwrap();
                    if n < 0 {
                        return Reply::Bulk(None);
                    }
                    let mut b = vec![0u8; n as usize + 2];
                    self.conn.read_exact(&mut b).unwrap();
                    b.truncate(n as usize);
                    Reply::Bulk(Some(b))
                }
                "*" => {
                    let n: i64 = rest.parse().unwrap();
                    if n < 0 {
                        return Reply::Array(None);
                    }
                    Reply::Array(Some((0..n).map(|_| self.reply()).collect()))
                }
                _ => panic!("bad reply line {l:?}"),
            }
        }

        /// Runs `EVAL script 0` and returns its bulk-string result (or the error as text).
        pub fn eval(&mut self, script: &str) -> String {
            match self.command(&[b"EVAL", script.as_bytes(), b"0"]) {
                Reply::Bulk(Some(b)) => String::from_utf8_lossy(&b).into_owned(),
                other => format!("{other:?}"),
            }
        }
    }

    impl Drop for Redis {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    /// A Lua 5.1 VM with the libraries Redis loads, chunks named as Redis names them.
    pub struct Vm {
        pub lua: Lua,
    }

    impl Vm {
        pub fn new() -> Vm {
            let lua = Lua::new_with(
                StdLib::TABLE | StdLib::STRING | StdLib::MATH,
                LuaOptions::default(),
            )
            .unwrap();
            prefixkv_lua::load_libraries(&lua).unwrap();
            Vm { lua }
        }

        pub fn eval(&self, script: &str) -> String {
            match self
                .lua
                .load(script)
                .set_name("@user_script")
                .eval::<prefixkv_lua::mlua::Value>()
            {
                Ok(prefixkv_lua::mlua::Value::String(s)) => {
                    String::from_utf8_lossy(&s.as_bytes()).into_owned()
                }
                Ok(other) => format!("{other:?}"),
                Err(e) => format!("error: {e}"),
            }
        }
    }

    /// Runs every case on both and returns the mismatches, formatted for a failure message.
    pub fn compare(redis: &mut Redis, vm: &Vm, cases: &[String]) -> Vec<String> {
        let mut bad = Vec::new();
        for body in cases {
            let s = script(body);
            let want = redis.eval(&s);
            let got = vm.eval(&s);
            if std::env::var_os("LUA_DIFF_DUMP").is_some() {
                eprintln!("{body}\n  => {want}");
            }
            if want != got {
                bad.push(format!("case: {body}\n  redis: {want}\n  ours:  {got}"));
            }
        }
        bad
    }
}

use common::{compare, Redis, Vm};

fn run(cases: &[&str]) {
    let mut redis = Redis::start();
    let vm = Vm::new();
    let cases: Vec<String> = cases.iter().map(|s| s.to_string()).collect();
    let bad = compare(&mut redis, &vm, &cases);
    assert!(
        bad.is_empty(),
        "{} of {} cases differ:\n{}",
        bad.len(),
        cases.len(),
        bad.join("\n")
    );
}

#[test]
fn harness_detects_differences() {
    let mut redis = Redis::start();
    let vm = Vm::new();
    // `redis` exists only on the server: the harness must report this case.
    let bad = compare(
        &mut redis,
        &vm,
        &["return type(redis)".to_string(), "return 1 + 1".to_string()],
    );
    assert_eq!(bad.len(), 1, "{bad:?}");
    assert!(bad[0].contains("\"table\""), "{bad:?}");
}

#[test]
fn names_and_positions_match_redis() {
    // How a function is reached decides the name and position in its errors.
    run(&[
        "local d = cjson.decode return d('[')",
        "local d = cjson.decode local x = d('[') return x",
        "local c = cjson return c.decode('[')",
        "return cjson:decode()",
        "return cjson:encode()",
        "return struct:pack()",
        "return bit:tohex()",
        "return pcall(cjson.decode, '[')",
        "return pcall(struct.unpack, 'b', 'a', 0)",
        "local t = {f = cmsgpack.unpack} return t.f('\\193')",
        "return select(2, pcall(bit.band, 'x'))",
        "local function f() return cjson.decode('x') end return f()",
        // Many arguments (past what one mlua reference per argument could hold).
        "local t = {} for i = 1, 7990 do t[i] = 'ab' end return #struct.pack(string.rep('c1', 7990), unpack(t))",
        "local t = {} for i = 1, 300 do t[i] = 'a' end t[301] = 'x' return struct.pack(string.rep('s', 300) .. 'b', unpack(t))",
        "local t = {} for i = 1, 300 do t[i] = 'a' end return struct.pack(string.rep('s', 301), unpack(t))",
        "local t = {} for i = 1, 7000 do t[i] = i end return bit.bor(unpack(t)), bit.bxor(unpack(t))",
        "local t = {} for i = 1, 7000 do t[i] = {} end return select('#', cjson.encode(unpack(t)))",
        "local t = {} for i = 1, 3999 do t[i] = {i} end return #cmsgpack.pack(unpack(t))",
        "local t = {} for i = 1, 4001 do t[i] = {i} end return cmsgpack.pack(unpack(t))",
        "local t = {} for i = 1, 7000 do t[i] = 's' end return select('#', cmsgpack.unpack(unpack(t)))",
        "local ok, e = pcall(cjson.decode, '[') return type(e), e .. '!'",
    ]);
}

#[test]
fn bit_matches_redis() {
    run(&[
        "return bit.tobit(1), bit.tobit(-1), bit.tobit(2^32 + 5), bit.tobit(2^31), bit.tobit(1.5), bit.tobit(2.5), bit.tobit(-2.5)",
        "return bit.tobit(0xffffffff), bit.tobit(2^52), bit.tobit(2^53 + 3), bit.tobit(-2^63), bit.tobit(1e300), bit.tobit(0/0), bit.tobit(1/0)",
        "return bit.tobit('12'), bit.tobit(' 0x10 ')",
        "return bit.tobit('x')",
        "return bit.tobit()",
        "return bit.tobit({})",
        "return bit.bnot(0), bit.bnot(-1), bit.bnot(0x12345678)",
        "return bit.band(0xff, 0x0f), bit.band(-1, 0x7fffffff, 0x0ff0), bit.band(5)",
        "return bit.bor(1, 2, 4, 8), bit.bxor(0xff, 0x0f, 0xf0), bit.bxor(1)",
        "return bit.band(1, 'a', 2)",
        "return bit.bor(1, 2, nil)",
        "return bit.band()",
        "return bit.lshift(1, 0), bit.lshift(1, 31), bit.lshift(1, 32), bit.lshift(1, 33), bit.lshift(0xff, -1)",
        "return bit.rshift(-1, 1), bit.rshift(-1, 31), bit.rshift(0x80000000, 4), bit.rshift(1, 64)",
        "return bit.arshift(-1, 4), bit.arshift(0x80000000, 31), bit.arshift(256, 4)",
        "return bit.rol(0x12345678, 4), bit.rol(0x12345678, 0), bit.rol(1, 32), bit.rol(-1, 7)",
        "return bit.ror(0x12345678, 4), bit.ror(0x12345678, 0), bit.ror(1, 1)",
        "return bit.bswap(0x12345678), bit.bswap(-1), bit.bswap(1)",
        "return bit.tohex(0x1234abcd), bit.tohex(255, 2), bit.tohex(255, -2), bit.tohex(-1, 3), bit.tohex(1, 0)",
        "return bit.tohex(0x1234abcd, 12), bit.tohex(0x1234abcd, -12), bit.tohex(7, 1), bit.tohex(-1)",
        "return bit.tohex(1, nil)",
        "return bit.lshift(1)",
        "return pcall(bit.band, 1, {})",
        "local b = bit return b.bor(1, 'z')",
    ]);
}

#[test]
fn struct_matches_redis() {
    run(&[
        "return struct.pack('b', 1), struct.pack('B', 255), struct.pack('h', -2), struct.pack('>H', 258), struct.pack('<i', 7)",
        "return struct.pack('>l', -1), struct.pack('L', 2^40), struct.pack('T', 5), struct.pack('>i3', 65536 + 2), struct.pack('<I16', 1)",
        "return struct.pack('>i16', -1), struct.pack('<i9', -2), struct.pack('i0', 5)",
        "return struct.pack('>L', 2^64), struct.pack('>L', 2^63), struct.pack('>l', 2^63), struct.pack('>l', -2^64), struct.pack('>L', 0/0), struct.pack('>b', 300), struct.pack('B', -1), struct.pack('B', 1.9)",
        "return struct.pack('f', 1.5), struct.pack('>f', 0.1), struct.pack('d', 0.1), struct.pack('>d', -2)",
        "return struct.pack('c3', 'abcdef'), struct.pack('c0', 'abc'), struct.pack('s', 'ab'), struct.pack('s', 'a\\0b'), struct.pack('c', 'xyz')",
        "return struct.pack('c5', 'ab')",
        "return struct.pack('bc5', 1, 'ab')",
        "return struct.pack('x b x', 1), struct.pack('!4 b i', 1, 2), struct.pack('!b h i d', 1, 2, 3, 4), struct.pack('!2 b d', 1, 2)",
        "return struct.pack('!3 b', 1)",
        "return struct.pack('!0 b', 1)",
        "return struct.pack('!1 b i', 1, 2), struct.pack('! b d', 1, 2), struct.pack('!16 b d', 1, 2)",
        "return struct.pack('i33', 1)",
        "return struct.pack('i99999999999', 1)",
        "return struct.pack('z', 1)",
        "return struct.pack('b5', 1)",
        "return struct.pack('b')",
        "return struct.pack('b', 'x')",
        "return struct.pack('b', '12')",
        "return struct.pack('s', {})",
        "return struct.pack()",
        "return struct.pack(12, 1)",
        "return struct.pack('b\\0z', 1)",
        "return struct.unpack('b', '\\255'), struct.unpack('B', '\\255'), struct.unpack('>h', '\\255\\254'), struct.unpack('<H', '\\1\\2')",
        "return struct.unpack('>i', '\\0\\0\\1\\0'), struct.unpack('<l', '\\255\\255\\255\\255\\255\\255\\255\\255'), struct.unpack('>L', '\\255\\255\\255\\255\\255\\255\\255\\255')",
        "return struct.unpack('>i3', '\\255\\255\\254'), struct.unpack('<I3', '\\1\\2\\3'), struct.unpack('>i16', string.rep('\\255', 16)), struct.unpack('<i12', string.rep('\\1', 12))",
        "return struct.unpack('i0', 'abc'), struct.unpack('I0', '')",
        "return struct.unpack('f', struct.pack('f', 1.25)), struct.unpack('>d', struct.pack('>d', 0.1))",
        "return struct.unpack('c2c1', 'abc'), struct.unpack('s', 'ab\\0cd'), struct.unpack('ss', 'a\\0b\\0')",
        "return struct.unpack('s', 'abc')",
        "return struct.unpack('bc0', '\\3abcd'), struct.unpack('c1c0', '2abcd'), struct.unpack('>hc0', '\\0\\2xyz')",
        "return struct.unpack('c0', 'abc')",
        "return struct.unpack('sc0', 'x\\0abc')",
        "return struct.unpack('bc0', '\\9abc')",
        "return struct.unpack('b', 'abc', 2), struct.unpack('b', 'abc', 3), struct.unpack('bb', 'abc', 2)",
        "return struct.unpack('b', 'abc', 4)",
        "return struct.unpack('b', 'abc', 0)",
        "return struct.unpack('b', 'abc', -1)",
        "return struct.unpack('i', 'abc')",
        "return struct.unpack('!4 b i', '\\1\\0\\0\\0\\2\\0\\0\\0'), struct.unpack('x b', 'ab'), struct.unpack('  b', 'a')",
        "return struct.unpack('z', 'a')",
        "return struct.unpack('b', nil)",
        "return struct.unpack(nil, 'a')",
        "return struct.unpack('b', 'a', 'x')",
        "return select('#', struct.unpack(string.rep('b', 3000), string.rep('a', 3000)))",
        "return select('#', struct.unpack(string.rep('b', 7997), string.rep('a', 7997)))",
        "return struct.unpack(string.rep('b', 7998), string.rep('a', 7998))",
        "return struct.size('b'), struct.size('bhilLTfdx'), struct.size('!bd'), struct.size('!4 b d'), struct.size('c7'), struct.size('i3 i'), struct.size('')",
        "return struct.size('z'), struct.size('zq'), struct.size('<>')",
        "return struct.size('s')",
        "return struct.size('c0')",
        "return struct.size('*')",
        "return struct.size('i40')",
        "return struct.size('!5')",
        "return struct.size()",
    ]);
}

#[test]
fn cjson_encode_matches_redis() {
    run(&[
        "return cjson.encode(1), cjson.encode(-0.0), cjson.encode(0.1), cjson.encode(1/3), cjson.encode(1e21), cjson.encode(123456789012345678), cjson.encode(1e-5), cjson.encode(0.0001)",
        "return cjson.encode(2^53), cjson.encode(-1.5e-300), cjson.encode(5e-324), cjson.encode(1.7976931348623157e308), cjson.encode(100), cjson.encode(12345678901234)",
        "return cjson.encode('a/b\"c\\\\d'), cjson.encode('\\0\\1\\8\\9\\10\\11\\12\\13\\31\\127\\128\\255'), cjson.encode('')",
        "return cjson.encode(true), cjson.encode(false), cjson.encode(nil), cjson.encode(cjson.null)",
        "return cjson.encode({}), cjson.encode({1, 2, 3}), cjson.encode({'a', {}, {x = 1}}), cjson.encode({[1] = 1, [2] = 2, [4] = 4})",
        "return cjson.encode({a = 1}), cjson.encode({[1.5] = 1}), cjson.encode({[0] = 1}), cjson.encode({[-1] = 1}), cjson.encode({1, 2, x = 3})",
        "return cjson.encode({[3] = 1}), cjson.encode({[10] = 1}), cjson.encode({[1] = 1, [20] = 2})",
        "return cjson.encode({[11] = 1})",
        "return cjson.encode({[1] = 1, [30] = 1})",
        "return cjson.encode({[true] = 1})",
        "return cjson.encode({[{}] = 1})",
        "return cjson.encode(function() end)",
        "return cjson.encode({f = function() end})",
        "return cjson.encode(coroutine.create(function() end))",
        "return cjson.encode(0/0)",
        "return cjson.encode(1/0)",
        "return cjson.encode({[1/0] = 1})",
        "return cjson.encode()",
        "return cjson.encode(1, 2)",
        "return pcall(cjson.encode)",
        "local t = {} t[1] = t return cjson.encode(t)",
        "local t = {} local c = t for i = 1, 999 do c[1] = {} c = c[1] end return #cjson.encode(t)",
        "local t = {} local c = t for i = 1, 1000 do c[1] = {} c = c[1] end return cjson.encode(t)",
        "local t = {} local c = t for i = 1, 999 do c.k = {} c = c.k end return #cjson.encode(t)",
        "local c = cjson.new() c.encode_max_depth(9000) local t = {} local x = t for i = 1, 7996 do x[1] = {} x = x[1] end return #c.encode(t)",
        "local c = cjson.new() c.encode_max_depth(9000) local t = {} local x = t for i = 1, 7997 do x[1] = {} x = x[1] end return c.encode(t)",
        "local c = cjson.new() c.encode_max_depth(9000) local t = {} local x = t for i = 1, 3998 do x.k = {} x = x.k end return c.encode(t)",
        "local c = cjson.new() c.encode_max_depth(9000) local t = {} local x = t for i = 1, 3997 do x.k = {} x = x.k end return #c.encode(t)",
        "local c = cjson.new() return c.encode_number_precision(), c.encode_number_precision(3), c.encode(math.pi), c.encode(1234567), c.encode(0.0001234567)",
        "local c = cjson.new() c.encode_number_precision(1) return c.encode(2.5), c.encode(3.5), c.encode(0.25), c.encode(95)",
        "local c = cjson.new() return c.encode_number_precision(0)",
        "local c = cjson.new() return c.encode_number_precision(15)",
        "local c = cjson.new() return c.encode_number_precision('x')",
        "local c = cjson.new() return c.encode_number_precision(1, 2)",
        "local c = cjson.new() return c.encode_number_precision('7'), c.encode_number_precision(9.9), c.encode(1/3)",
        "local c = cjson.new() return c.encode_invalid_numbers(), c.encode_invalid_numbers(true), c.encode(1/0), c.encode(-1/0), c.encode(0/0), c.encode({[1/0] = 1})",
        "local c = cjson.new() return c.encode_invalid_numbers('null'), c.encode(1/0), c.encode({0/0}), c.encode({[1/0] = 1})",
        "local c = cjson.new() return c.encode_invalid_numbers('off'), c.encode_invalid_numbers('on'), c.encode_invalid_numbers(false)",
        "local c = cjson.new() return c.encode_invalid_numbers('maybe')",
        "local c = cjson.new() return c.encode_invalid_numbers({})",
        "local c = cjson.new() return c.encode_invalid_numbers(1)",
        "local c = cjson.new() return c.encode_sparse_array(), c.encode_sparse_array(true), c.encode({[1] = 1, [30] = 2}), c.encode_sparse_array(false, 0), c.encode({[1] = 1, [30] = 2})",
        "local c = cjson.new() return c.encode_sparse_array(nil, 3, 2), c.encode({[1] = 1, [2] = 1, [7] = 1})",
        "local c = cjson.new() return c.encode_sparse_array(nil, 3, 2), c.encode({[1] = 1, [2] = 1, [9] = 1})",
        "local c = cjson.new() return c.encode_sparse_array(nil, -1)",
        "local c = cjson.new() local ok, e = pcall(c.encode_sparse_array, true, -1) return ok, e, c.encode_sparse_array()",
        "local c = cjson.new() return c.encode_sparse_array(1, 2, 3, 4)",
        "local c = cjson.new() return c.encode_sparse_array('on', '5', 6.7)",
        "local c = cjson.new() return c.encode_keep_buffer(), c.encode_keep_buffer(false), c.encode_keep_buffer('on'), c.encode({1})",
        "local c = cjson.new() return c.encode_max_depth(), c.encode_max_depth(2), c.encode({{1}})",
        "local c = cjson.new() c.encode_max_depth(2) return c.encode({{{1}}})",
        "local c = cjson.new() return c.encode_max_depth(0)",
        "local c = cjson.new() return c.decode_max_depth(), c.decode_max_depth(3), c.decode_invalid_numbers(), c.decode_invalid_numbers(false)",
        "return cjson._NAME, cjson._VERSION, type(cjson.new), cjson.null == cjson.new().null",
        "return cjson.encode({[1] = 'a', [2] = cjson.null, [3] = 'c'}), cjson.encode({nil, 2})",
        "return cjson.encode({['1'] = 1, [2] = 2})",
        "return cjson.encode({name = 'x', list = {1, 2, {a = true}}, empty = {}, n = -12.5})",
        "local t = setmetatable({}, {__index = function() return 1 end}) return cjson.encode(t)",
    ]);
}

#[test]
fn cjson_decode_matches_redis() {
    run(&[
        "return cjson.decode('1'), cjson.decode(' -2.5e3 '), cjson.decode('0'), cjson.decode('-0'), cjson.decode('1E2'), cjson.decode('1e-2')",
        "return cjson.decode('\"abc\"'), cjson.decode('\"a\\\\u00e9\\\\n\\\\t\\\\/\\\\\\\\\\\\\"\"'), cjson.decode('\"\\\\ud83d\\\\ude00\"'), cjson.decode('\"\\\\u0000x\"')",
        "return cjson.decode('true'), cjson.decode('false'), cjson.decode('null') == cjson.null",
        "return cjson.decode('[1, 2, [3, {\"a\": null}], {}]')",
        "return cjson.decode('{\"a\": 1, \"b\": [true, false], \"c\": {\"d\": \"e\"}, \"a\": 2}')",
        "return cjson.decode('[]'), cjson.decode('{}'), cjson.decode(' [ ] '), cjson.decode('\\t{\\r\\n}')",
        "return cjson.decode('0x10'), cjson.decode('+5'), cjson.decode('007'), cjson.decode('-Infinity'), cjson.decode('inf'), cjson.decode('nan') ~= cjson.decode('nan')",
        "return cjson.decode('0x1p4'), cjson.decode('1.'), cjson.decode('-0x1.8p1'), cjson.decode('NaN(123)') ~= 0",
        "return cjson.decode(123), cjson.decode(1.5)",
        "return cjson.decode('')",
        "return cjson.decode('[')",
        "return cjson.decode(']')",
        "return cjson.decode('[1,]')",
        "return cjson.decode('[1 2]')",
        "return cjson.decode('{\"a\" 1}')",
        "return cjson.decode('{\"a\": 1,}')",
        "return cjson.decode('{1: 2}')",
        "return cjson.decode('{\"a\": 1 \"b\"}')",
        "return cjson.decode('1 2')",
        "return cjson.decode('tru')",
        "return cjson.decode('truex')",
        "return cjson.decode('nul')",
        "return cjson.decode('-')",
        "return cjson.decode('.5')",
        "return cjson.decode('1e')",
        "return cjson.decode('\"abc')",
        "return cjson.decode('\"a\\\\qb\"')",
        "return cjson.decode('\"a\\\\u12g4\"')",
        "return cjson.decode('\"\\\\ud800\"')",
        "return cjson.decode('\"\\\\udc00\"')",
        "return cjson.decode('\"\\\\ud800\\\\u0041\"')",
        "return cjson.decode('\"\\\\')",
        "return cjson.decode('[1]\\0garbage')",
        "return cjson.decode('\"a\\0b\"')",
        "return cjson.decode('\\0[')",
        "return cjson.decode('[\\0')",
        "return cjson.decode('@')",
        "return cjson.decode('[1] x')",
        "return cjson.decode()",
        "return cjson.decode('1', 2)",
        "return cjson.decode({})",
        "return cjson.decode(nil)",
        "return pcall(cjson.decode, '{')",
        "return #cjson.decode(string.rep('[', 1000) .. string.rep(']', 1000))",
        "return cjson.decode(string.rep('[', 1001) .. string.rep(']', 1001))",
        "return cjson.decode(string.rep('{\"a\":', 1001) .. '1' .. string.rep('}', 1001))",
        "local c = cjson.new() c.decode_max_depth(10000) return #c.decode(string.rep('[', 7998) .. string.rep(']', 7998))",
        "local c = cjson.new() c.decode_max_depth(10000) return c.decode(string.rep('[', 7999) .. string.rep(']', 7999))",
        "local c = cjson.new() c.decode_max_depth(10000) return type(c.decode(string.rep('{\"a\":', 3999) .. '1' .. string.rep('}', 3999)))",
        "local c = cjson.new() c.decode_max_depth(10000) return c.decode(string.rep('{\"a\":', 4000) .. '1' .. string.rep('}', 4000))",
        "local c = cjson.new() c.decode_max_depth(2) return c.decode('[[1]]'), pcall(c.decode, '[[[1]]]')",
        "local c = cjson.new() c.decode_invalid_numbers(false) return c.decode('1.5'), c.decode('-0'), pcall(c.decode, '0x10')",
        "local c = cjson.new() c.decode_invalid_numbers(false) return pcall(c.decode, '+1')",
        "local c = cjson.new() c.decode_invalid_numbers(false) return pcall(c.decode, 'inf')",
        "local c = cjson.new() c.decode_invalid_numbers(false) return pcall(c.decode, '-inf')",
        "local c = cjson.new() c.decode_invalid_numbers(false) return pcall(c.decode, '01')",
        "local c = cjson.new() c.decode_invalid_numbers(false) return pcall(c.decode, 'NaN')",
        "return cjson.decode(cjson.encode({a = {1, 2, {b = 'c'}}, d = 'e\\0f'}))",
        "return cjson.decode('[1e400, -1e400, 1e-400]')",
        "return cjson.decode('123456789012345678901234567890'), cjson.decode('0.1000000000000000055511151231257827')",
    ]);
}

#[test]
fn cmsgpack_matches_redis() {
    run(&[
        "return cmsgpack.pack(0), cmsgpack.pack(127), cmsgpack.pack(128), cmsgpack.pack(255), cmsgpack.pack(256), cmsgpack.pack(65535), cmsgpack.pack(65536), cmsgpack.pack(2^32 - 1), cmsgpack.pack(2^32), cmsgpack.pack(2^53)",
        "return cmsgpack.pack(-1), cmsgpack.pack(-32), cmsgpack.pack(-33), cmsgpack.pack(-128), cmsgpack.pack(-129), cmsgpack.pack(-32768), cmsgpack.pack(-32769), cmsgpack.pack(-2^31), cmsgpack.pack(-2^31 - 1), cmsgpack.pack(-2^63)",
        "return cmsgpack.pack(1.5), cmsgpack.pack(0.1), cmsgpack.pack(1/0), cmsgpack.pack(-1/0), cmsgpack.pack(0/0), cmsgpack.pack(2^63), cmsgpack.pack(-0.0), cmsgpack.pack(1e300)",
        "return cmsgpack.pack(''), cmsgpack.pack('abc'), cmsgpack.pack(string.rep('x', 31)), cmsgpack.pack(string.rep('x', 32)), #cmsgpack.pack(string.rep('x', 255)), #cmsgpack.pack(string.rep('x', 256)), #cmsgpack.pack(string.rep('x', 65536))",
        "return cmsgpack.pack(true), cmsgpack.pack(false), cmsgpack.pack(nil), cmsgpack.pack(function() end), cmsgpack.pack(cjson.null), cmsgpack.pack(coroutine.create(function() end))",
        "return cmsgpack.pack({}), cmsgpack.pack({1, 2, 3}), cmsgpack.pack({a = 1}), cmsgpack.pack({1, 2, nil, 4}), cmsgpack.pack({[2] = 1}), cmsgpack.pack({[1.5] = 1})",
        "local t = {} for i = 1, 16 do t[i] = i end local m = {} for i = 1, 16 do m['k' .. i] = i end return cmsgpack.pack(t), #cmsgpack.pack(m)",
        "local t = {} for i = 1, 70000 do t[i] = 1 end return #cmsgpack.pack(t)",
        "return cmsgpack.pack(1, 'a', {2}), cmsgpack.pack({{{{}}}})",
        "local t = {} t[1] = t return cmsgpack.pack(t)",
        "local t = {} local c = t for i = 1, 20 do c[1] = {} c = c[1] end return cmsgpack.pack(t)",
        "local t = {} t[t] = 1 return cmsgpack.pack(t)",
        "return cmsgpack.pack()",
        "return pcall(cmsgpack.pack)",
        "return #cmsgpack.pack(unpack((function() local t = {} for i = 1, 4000 do t[i] = 'x' end return t end)()))",
        "return cmsgpack.pack(unpack((function() local t = {} for i = 1, 4001 do t[i] = 1 end return t end)()))",
        "return cmsgpack.unpack(cmsgpack.pack(1, -1, 1.5, 'abc', true, false, {1, 2}, {a = {b = 'c'}}))",
        "return cmsgpack.unpack(cmsgpack.pack(2^53, -2^63, 2^32, -2^31 - 1, 0.1, 1/0))",
        "return cmsgpack.unpack('\\207\\255\\255\\255\\255\\255\\255\\255\\255'), cmsgpack.unpack('\\211\\128\\0\\0\\0\\0\\0\\0\\0'), cmsgpack.unpack('\\208\\200'), cmsgpack.unpack('\\209\\255\\0'), cmsgpack.unpack('\\210\\255\\255\\255\\0')",
        "return cmsgpack.unpack('\\217\\3abc'), cmsgpack.unpack('\\218\\0\\2ab'), cmsgpack.unpack('\\219\\0\\0\\0\\1a'), cmsgpack.unpack('\\220\\0\\2\\1\\2'), cmsgpack.unpack('\\221\\0\\0\\0\\1\\7'), cmsgpack.unpack('\\222\\0\\1\\1\\2'), cmsgpack.unpack('\\223\\0\\0\\0\\1\\1\\2')",
        "return cmsgpack.unpack('\\147\\1\\192\\3'), cmsgpack.unpack('\\130\\1\\192\\2\\3')",
        "return cmsgpack.unpack('\\129\\192\\1')",
        "return cmsgpack.unpack('\\129\\203\\127\\248\\0\\0\\0\\0\\0\\0\\1')",
        "return cmsgpack.unpack('\\129\\192\\217')",
        "return cmsgpack.unpack('\\129\\145\\1\\2')",
        "return cmsgpack.unpack('')",
        "return cmsgpack.unpack('\\217\\5ab')",
        "return cmsgpack.unpack('\\219\\255\\255\\255\\255ab')",
        "return cmsgpack.unpack('\\221\\255\\255\\255\\255\\1')",
        "return cmsgpack.unpack('\\223\\255\\255\\255\\255')",
        "return cmsgpack.unpack('\\193')",
        "return cmsgpack.unpack('\\196\\1a')",
        "return cmsgpack.unpack('\\1\\212')",
        "return cmsgpack.unpack('\\205\\1')",
        "return cmsgpack.unpack()",
        "return cmsgpack.unpack({})",
        "return cmsgpack.unpack(12)",
        "return cmsgpack.unpack_one(cmsgpack.pack(1, 2, 3)), cmsgpack.unpack_one(cmsgpack.pack(1, 2, 3), 1), cmsgpack.unpack_one(cmsgpack.pack(1, 2, 3), 2), cmsgpack.unpack_one(cmsgpack.pack(1, 2, 3), 3)",
        "return cmsgpack.unpack_one(cmsgpack.pack(1), 2)",
        "return cmsgpack.unpack_one(cmsgpack.pack(1), -1)",
        "return cmsgpack.unpack_one('abc', 'x')",
        "return cmsgpack.unpack_one('\\1', '0')",
        "return cmsgpack.unpack_limit(cmsgpack.pack(1, 2, 3), 2), cmsgpack.unpack_limit(cmsgpack.pack(1, 2, 3), 2, 2), cmsgpack.unpack_limit(cmsgpack.pack(1, 2, 3), 0), cmsgpack.unpack_limit(cmsgpack.pack(1, 2, 3), 0, 1), cmsgpack.unpack_limit(cmsgpack.pack(1, 2, 3), 5)",
        "return cmsgpack.unpack_limit(cmsgpack.pack(1), -1)",
        "return cmsgpack.unpack_limit(cmsgpack.pack(1))",
        "return cmsgpack.unpack_limit('\\1', 1.9, 0.5)",
        "return select('#', cmsgpack.unpack(string.rep('\\1', 7998)))",
        "return select('#', cmsgpack.unpack(string.rep('\\1', 7999)))",
        "return cmsgpack.unpack(string.rep('\\1', 8000))",
        "return select('#', cmsgpack.unpack_limit(string.rep('\\1', 9000), 7998))",
        "return cmsgpack.unpack_limit(string.rep('\\1', 9000), 7999)",
        "return type(cmsgpack.unpack(string.rep('\\145', 3998) .. '\\1'))",
        "return cmsgpack.unpack(string.rep('\\145', 3999) .. '\\1')",
        "return type(cmsgpack.unpack(string.rep('\\129\\1', 3997) .. '\\1'))",
        "return cmsgpack.unpack(string.rep('\\129\\1', 7999) .. '\\1')",
        "return cmsgpack.unpack(string.rep('\\129\\145', 2000) .. '\\1')",
        "return cmsgpack.unpack(string.rep('\\145', 10) .. '\\193')",
        "return cmsgpack._NAME, cmsgpack._VERSION, cmsgpack._COPYRIGHT, cmsgpack._DESCRIPTION",
    ]);
}

/// `bytes` as a one-line Lua string literal.
fn lua_bytes(bytes: &[u8]) -> String {
    let mut s = String::from("'");
    for b in bytes {
        s.push_str(&format!("\\{b:03}"));
    }
    s.push('\'');
    s
}

/// `n` as a Lua expression that evaluates to exactly `n`.
fn lua_num(n: f64) -> String {
    if n.is_nan() {
        "(0/0)".into()
    } else if n.is_infinite() {
        if n > 0.0 { "(1/0)" } else { "(-1/0)" }.into()
    } else {
        // Rust's shortest round-trip form reads back as the same double.
        format!("({n:e})")
    }
}

/// Random inputs on both sides: decoders on random bytes, formatting on random numbers.
#[test]
fn random_inputs_match_redis() {
    use proptest::prelude::*;
    use proptest::strategy::ValueTree;
    use proptest::test_runner::{Config, TestRunner};

    let mut runner = TestRunner::new(Config::default());
    let mut cases = Vec::new();
    let json_alphabet: Vec<u8> = b"[]{}:,\"\\u0123456789abcdefnulltrue-+.eExI \t\n".to_vec();
    let json = proptest::collection::vec(proptest::sample::select(json_alphabet), 0..30);
    let mp_alphabet: Vec<u8> = vec![
        0x90, 0x92, 0x81, 0xdc, 0xde, 0xd9, 0xda, 0xc0, 0xc2, 0xc3, 0xca, 0xcb, 0xcc, 0xcd, 0xcf,
        0xd0, 0xd1, 0xd3, 0xa2, 0xff, 0x00, 0x01, 0x7f, 0xc1, 0x41,
    ];
    let mp = proptest::collection::vec(proptest::sample::select(mp_alphabet), 0..30);
    let fmt = proptest::collection::vec(
        proptest::sample::select(b"<>!4 xbBhHlLTiI3fdcs0".to_vec()),
        0..10,
    );
    let data = proptest::collection::vec(any::<u8>(), 0..40);
    let number = prop_oneof![
        any::<f64>(),
        any::<i64>().prop_map(|n| n as f64),
        (-1_000_000i64..1_000_000).prop_map(|n| n as f64 / 1000.0),
        (-70i32..70).prop_map(|e| 2f64.powi(e * 16)),
    ];
    for _ in 0..250 {
        let j = json.new_tree(&mut runner).unwrap().current();
        cases.push(format!("return cjson.decode({})", lua_bytes(&j)));
        let m = mp.new_tree(&mut runner).unwrap().current();
        cases.push(format!("return cmsgpack.unpack({})", lua_bytes(&m)));
        let f = fmt.new_tree(&mut runner).unwrap().current();
        let d = data.new_tree(&mut runner).unwrap().current();
        cases.push(format!(
            "return struct.unpack({}, {})",
            lua_bytes(&f),
            lua_bytes(&d)
        ));
        let n = number.new_tree(&mut runner).unwrap().current();
        let k = number.new_tree(&mut runner).unwrap().current();
        let (n, k) = (lua_num(n), lua_num(k));
        cases.push(format!(
            "return cjson.encode({n}), cmsgpack.pack({n}), bit.tobit({n}), bit.band({n}, {k}), bit.tohex({n}, {k}), bit.rol({n}, {k}), bit.arshift({n}, {k})"
        ));
        cases.push(format!(
            "return struct.pack('>l', {n}), struct.pack('<I3', {n}), struct.pack('f', {n}), struct.pack('>L', {k}), struct.pack('h', {k})"
        ));
        cases.push(format!(
            "local c = cjson.new() c.encode_invalid_numbers(true) c.encode_number_precision(1 + ({k} % 14)) return c.encode({{{n}, {k}, [{k}] = {n}}})"
        ));
    }
    let mut redis = Redis::start();
    let vm = Vm::new();
    let bad = compare(&mut redis, &vm, &cases);
    assert!(
        bad.is_empty(),
        "{} of {} cases differ:\n{}",
        bad.len(),
        cases.len(),
        bad.join("\n")
    );
}
