//! Property tests: the decoders never panic or allocate beyond a small Lua memory limit on
//! arbitrary bytes (they fail with a Lua error string instead), and encode -> decode round
//! trips keep values.
use prefixkv_lua::mlua::{Function, Lua, LuaOptions, StdLib, Table, Value};

use proptest::prelude::*;

/// A VM with the libraries and a 64 MiB Lua memory limit: inputs here are at most a few KiB,
/// so hitting the limit would mean an allocation sized by a number read from the input.
fn vm() -> Lua {
    let lua = Lua::new_with(
        StdLib::TABLE | StdLib::STRING | StdLib::MATH,
        LuaOptions::default(),
    )
    .unwrap();
    prefixkv_lua::load_libraries(&lua).unwrap();
    lua.set_memory_limit(64 << 20).unwrap();
    lua
}

const HELPERS: &str = r#"
local function eq(a, b)
  if type(a) ~= type(b) then return false end
  if type(a) ~= 'table' then return a == b end
  for k, v in pairs(a) do if not eq(v, b[k]) then return false end end
  for k in pairs(b) do if a[k] == nil then return false end end
  return true
end
return {
  decode = function(s) return pcall(cjson.decode, s) end,
  unpack = function(s) local r = {pcall(cmsgpack.unpack, s)} return r[1], r[2] end,
  sunpack = function(f, s) return pcall(struct.unpack, f, s) end,
  json_trip = function(v) return eq(v, cjson.decode(cjson.encode(v))) end,
  mp_trip = function(v) return eq(v, cmsgpack.unpack(cmsgpack.pack(v))) end,
  struct_trip = function(a, b, c, d, s) local f = '>i4 h B d B c0 s'
    local x, y, z, w, str, str2, nextpos = struct.unpack(f, struct.pack(f, a, b, c, d, #s, s, s))
    return x == a and y == b and z == c and w == d and str == s and str2 == s
      and nextpos == 4 + 2 + 1 + 8 + 1 + 2 * #s + 1 + 1 end,
}
"#;

fn helpers(lua: &Lua) -> Table {
    lua.load(HELPERS).eval().unwrap()
}

/// Checks a `pcall` result: success, or failure with a string message (never a userdata
/// carrying a Rust panic or an mlua error such as "not enough memory").
fn check_pcall(res: prefixkv_lua::mlua::Result<(bool, Value)>) -> Result<(), TestCaseError> {
    let (ok, v) = res.map_err(|e| TestCaseError::fail(format!("Rust-level error: {e}")))?;
    if !ok {
        match v {
            Value::String(s) => {
                let m = s.to_string_lossy();
                prop_assert!(!m.contains("not enough memory"), "{m}");
            }
            other => {
                return Err(TestCaseError::fail(format!(
                    "error is not a string: {other:?}"
                )))
            }
        }
    }
    Ok(())
}

/// JSON-ish bytes: mostly structural characters so the parser goes deep and wide.
fn jsonish() -> impl Strategy<Value = Vec<u8>> {
    let alphabet: Vec<u8> =
        b"[]{}:,\"\\u0123456789abcdefnulltruefalse-+.eExInfNaN \t\n\x00\xff".to_vec();
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..200),
        proptest::collection::vec(proptest::sample::select(alphabet), 0..400),
    ]
}

/// MessagePack-ish bytes: headers that claim large lengths, containers and fixints.
fn msgpackish() -> impl Strategy<Value = Vec<u8>> {
    let interesting: Vec<u8> = vec![
        0x90, 0x91, 0x9f, 0x80, 0x81, 0x8f, 0xdc, 0xdd, 0xde, 0xdf, 0xd9, 0xda, 0xdb, 0xc0, 0xc2,
        0xc3, 0xca, 0xcb, 0xcc, 0xcd, 0xce, 0xcf, 0xd0, 0xd1, 0xd2, 0xd3, 0xa3, 0xff, 0x00, 0x01,
        0x7f, 0xc1, 0xc4,
    ];
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..200),
        proptest::collection::vec(proptest::sample::select(interesting), 0..400),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn cjson_decode_never_panics(bytes in jsonish()) {
        let lua = vm();
        let f: Function = helpers(&lua).get("decode").unwrap();
        let s = lua.create_string(&bytes).unwrap();
        check_pcall(f.call(s))?;
    }

    #[test]
    fn cmsgpack_unpack_never_panics(bytes in msgpackish()) {
        let lua = vm();
        let f: Function = helpers(&lua).get("unpack").unwrap();
        let s = lua.create_string(&bytes).unwrap();
        check_pcall(f.call(s))?;
    }

    #[test]
    fn struct_unpack_never_panics(
        fmt in proptest::collection::vec(proptest::sample::select(b"<>!248 xbBhHlLTiI1632fdcs0z".to_vec()), 0..40),
        data in proptest::collection::vec(any::<u8>(), 0..100),
    ) {
        let lua = vm();
        let f: Function = helpers(&lua).get("sunpack").unwrap();
        let res: prefixkv_lua::mlua::Result<(bool, Value)> =
            f.call((lua.create_string(&fmt).unwrap(), lua.create_string(&data).unwrap()));
        check_pcall(res)?;
    }

    #[test]
    fn cjson_round_trip_keeps_values(v in json_value()) {
        let lua = vm();
        let f: Function = helpers(&lua).get("json_trip").unwrap();
        let value = v.to_lua(&lua);
        prop_assert!(f.call::<bool>(value).unwrap(), "{v:?}");
    }

    #[test]
    fn cmsgpack_round_trip_keeps_values(v in mp_value()) {
        let lua = vm();
        let f: Function = helpers(&lua).get("mp_trip").unwrap();
        let value = v.to_lua(&lua);
        prop_assert!(f.call::<bool>(value).unwrap(), "{v:?}");
    }

    #[test]
    fn struct_round_trip_keeps_values(a in any::<i32>(), b in any::<i16>(), c in any::<u8>(), d in any::<f64>().prop_filter("NaN", |d| !d.is_nan()), s in "[a-z]{0,20}") {
        let lua = vm();
        let f: Function = helpers(&lua).get("struct_trip").unwrap();
        prop_assert!(f.call::<bool>((a, b, c, d, s.clone())).unwrap());
    }
}

/// A Lua value without nil (tables cannot hold nil) for round trips.
#[derive(Clone, Debug)]
enum V {
    Num(f64),
    Str(Vec<u8>),
    Bool(bool),
    Arr(Vec<V>),
    Map(Vec<(Vec<u8>, V)>),
}

impl V {
    fn to_lua(&self, lua: &Lua) -> Value {
        match self {
            V::Num(n) => Value::Number(*n),
            V::Str(s) => Value::String(lua.create_string(s).unwrap()),
            V::Bool(b) => Value::Boolean(*b),
            V::Arr(items) => {
                let t = lua.create_table().unwrap();
                for (i, x) in items.iter().enumerate() {
                    t.raw_set(i + 1, x.to_lua(lua)).unwrap();
                }
                Value::Table(t)
            }
            V::Map(items) => {
                let t = lua.create_table().unwrap();
                for (k, x) in items {
                    t.raw_set(lua.create_string(k).unwrap(), x.to_lua(lua))
                        .unwrap();
                }
                Value::Table(t)
            }
        }
    }
}

fn tree(leaf: BoxedStrategy<V>, depth: u32) -> impl Strategy<Value = V> {
    leaf.prop_recursive(depth, 64, 8, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 1..6).prop_map(V::Arr),
            // Keys start with a letter: "1" stays a string key, so arrays stay arrays.
            proptest::collection::vec(("k[a-z0-9]{0,6}".prop_map(String::into_bytes), inner), 0..6)
                .prop_map(V::Map),
        ]
    })
}

/// Values JSON keeps exactly: numbers with at most 14 significant digits.
fn json_value() -> impl Strategy<Value = V> {
    let leaf = prop_oneof![
        (-1_000_000_000_000i64..1_000_000_000_000).prop_map(|n| V::Num(n as f64)),
        (-100_000i64..100_000).prop_map(|n| V::Num(n as f64 / 1024.0)),
        proptest::collection::vec(any::<u8>(), 0..20).prop_map(V::Str),
        any::<bool>().prop_map(V::Bool),
    ]
    .boxed();
    tree(leaf, 6)
}

/// Values MessagePack keeps exactly: any number but NaN, nesting below its 16-level limit.
fn mp_value() -> impl Strategy<Value = V> {
    let leaf = prop_oneof![
        any::<f64>()
            .prop_filter("NaN is not equal to itself", |n| !n.is_nan())
            .prop_map(V::Num),
        any::<i64>().prop_map(|n| V::Num(n as f64)),
        proptest::collection::vec(any::<u8>(), 0..40).prop_map(V::Str),
        any::<bool>().prop_map(V::Bool),
    ]
    .boxed();
    tree(leaf, 10)
}
