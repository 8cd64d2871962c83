//! The bounds the libraries promise: capped outputs, and deep nesting handled without Rust
//! recursion (run on a thread with a small stack, where recursion per level would overflow).
use prefixkv_lua::mlua::{Lua, LuaOptions, StdLib};
use prefixkv_lua::Limits;

fn vm(limits: Limits) -> Lua {
    let lua = Lua::new_with(
        StdLib::TABLE | StdLib::STRING | StdLib::MATH,
        LuaOptions::default(),
    )
    .unwrap();
    prefixkv_lua::load_libraries_with(&lua, limits).unwrap();
    lua
}

/// A table whose encoding is 10^9 leaves long, built from shared subtables in 9 levels.
const HUGE: &str = "local a = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10} \
for i = 1, 8 do a = {a, a, a, a, a, a, a, a, a, a} end ";

#[test]
fn outputs_are_capped() {
    let lua = vm(Limits {
        max_output_bytes: 1 << 20,
    });
    let (ok, msg): (bool, String) = lua
        .load(format!("{HUGE} return pcall(cjson.encode, a)"))
        .eval()
        .unwrap();
    assert!(!ok);
    assert_eq!(msg, "Cannot serialise, output exceeds 1048576 bytes");
    let (ok, msg): (bool, String) = lua
        .load(format!("{HUGE} return pcall(cmsgpack.pack, a)"))
        .eval()
        .unwrap();
    assert!(!ok);
    assert_eq!(msg, "MessagePack pack output exceeds 1048576 bytes");
    // cjson.new() modules keep the limit.
    let (ok, msg): (bool, String) = lua
        .load(format!("{HUGE} return pcall(cjson.new().encode, a)"))
        .eval()
        .unwrap();
    assert!(!ok, "{msg}");
    // Below the cap the same libraries work.
    let n: usize = lua
        .load("return #cjson.encode({1, 2, {a = 'b'}}) + #cmsgpack.pack({1, 2})")
        .eval()
        .unwrap();
    assert_eq!(n, "[1,2,{\"a\":\"b\"}]".len() + 3);
}

#[test]
fn default_cap_is_redis_bulk_limit() {
    assert_eq!(Limits::default().max_output_bytes, 512 * 1024 * 1024);
}

#[test]
fn deep_nesting_does_not_recurse() {
    let worker = std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(|| {
            let lua = vm(Limits::default());
            let checks = [
                // cjson: as deep as Lua's C stack lets Redis go.
                "local c = cjson.new() c.decode_max_depth(100000) c.encode_max_depth(100000) \
                 local s = string.rep('[', 7997) .. string.rep(']', 7997) \
                 return c.encode(c.decode(s)) == string.rep('[', 7996) .. '{}' .. string.rep(']', 7996)",
                "local c = cjson.new() c.decode_max_depth(100000) c.encode_max_depth(100000) \
                 local s = string.rep('{\"k\":', 3996) .. '1' .. string.rep('}', 3996) \
                 return c.encode(c.decode(s)) == s",
                // cmsgpack: 3998 nested arrays, 3997 nested maps.
                "local t = cmsgpack.unpack(string.rep('\\145', 3998) .. '\\1') \
                 local d = 0 while type(t) == 'table' do t = t[1] d = d + 1 end return d == 3998 and t == 1",
                "local t = cmsgpack.unpack(string.rep('\\129\\1', 3997) .. '\\1') \
                 local d = 0 while type(t) == 'table' do t = t[1] d = d + 1 end return d == 3997 and t == 1",
                // Many results, past what inline results and mlua references could hold.
                "return select('#', cmsgpack.unpack(string.rep('\\1', 7998))) == 7998",
                "return select('#', struct.unpack(string.rep('b', 7997), string.rep('a', 7997))) == 7998",
            ];
            for (i, c) in checks.iter().enumerate() {
                let ok: bool = lua.load(*c).eval().unwrap_or_else(|e| panic!("check {i}: {e}"));
                assert!(ok, "check {i}");
            }
        })
        .unwrap();
    worker.join().expect("deep nesting on a 256 KiB stack");
}

/// mlua holds one reference per string or table argument it converts, in a stack of about
/// 8000 slots shared with the host; Lua allows calls with nearly 8000 arguments. The libraries
/// must not convert them one by one, or a host holding references would see a panic.
#[test]
fn many_arguments_while_the_host_holds_references() {
    let lua = vm(Limits::default());
    let held: Vec<_> = (0..1000)
        .map(|i| lua.create_string(format!("held {i}")).unwrap())
        .collect();
    let n: usize = lua
        .load(
            "local t = {} for i = 1, 7990 do t[i] = 'ab' end \
             return #struct.pack(string.rep('c1', 7990), unpack(t)) + select('#', cmsgpack.unpack(unpack(t)))",
        )
        .eval()
        .unwrap();
    assert_eq!(n, 7990 + 2);
    assert_eq!(held.len(), 1000);
}

/// `pcall` of a library function whose results fill pcall's frame: Lua 5.1's `pcall` then pushes
/// its status one slot past the frame's declared top (into the stack's spare slots). Lua's API
/// checks flag that push; Lua as it ships runs without them, and so do we (the workspace's
/// `lua-src` profile override). With them on, the property tests aborted on such inputs at
/// random (`cmsgpack_unpack_never_panics`, about one run in ten); this is that case, fixed.
#[test]
fn pcall_keeps_every_result_of_a_call_that_fills_its_frame() {
    let lua = vm(Limits::default());
    for count in [15usize, 16, 17, 18, 19, 20, 21, 40, 100, 7000] {
        // `count` msgpack `true`s: cmsgpack.unpack returns that many values.
        let packed = lua.create_string(vec![0xc3u8; count]).unwrap();
        lua.globals().set("packed", packed).unwrap();
        let (results, all_true): (i64, bool) = lua
            .load(
                "local r = {pcall(cmsgpack.unpack, packed)} \
                 local ok = r[1] == true \
                 for i = 2, #r do ok = ok and r[i] == true end \
                 return #r, ok",
            )
            .eval()
            .unwrap();
        assert_eq!(
            results,
            count as i64 + 1,
            "{count} values and pcall's status"
        );
        assert!(all_true, "{count}");
    }
}
