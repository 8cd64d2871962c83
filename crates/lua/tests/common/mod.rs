//! Test support: a real redis-server 7.0 and an mlua VM with `load_libraries`, running the same
//! Lua chunk and rendering its results as one comparable string.
#![allow(dead_code)]

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

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
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
            let port = free_port();
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
                    break;
                }
                if let Ok(s) = TcpStream::connect(("127.0.0.1", port)) {
                    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
                    let mut r = Redis {
                        child,
                        conn: BufReader::new(s),
                        _dir: dir,
                    };
                    if r.command(&[b"PING"]) == Reply::Status("PONG".into()) {
                        return r;
                    }
                    let _ = r.child.kill();
                    let _ = r.child.wait();
                    panic!("redis-server did not answer PING");
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
