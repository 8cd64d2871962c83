//! Redis's Lua libraries for prefixkv-server's scripts: `cjson`, `cmsgpack`, `bit` and `struct`,
//! written in Rust against mlua's Lua 5.1 (the Lua that Redis embeds).
//!
//! Invariants:
//! - Each library function behaves as the C function Redis 7.0 registers: same results, same
//!   error texts (raised as Lua strings, with the caller's "chunk:line: " prefix where
//!   `luaL_error` adds one), same argument checks and coercions. The few differences are
//!   listed in each module's top comment and in docs/server.md.
//! - No function allocates in proportion to a number read from its input without first
//!   checking that the input holds that much (msgpack and struct lengths, `c<n>`), and outputs
//!   that could grow without bound (cjson.encode, cmsgpack.pack over self-references) are
//!   capped.
//! - Deep nesting never recurses in Rust (explicit stacks) and never holds one mlua reference
//!   per level or per result, so no input can overflow the Rust stack or mlua's reference
//!   stack.
#![warn(missing_docs)]

pub use mlua;

mod bit;
mod call;
mod cjson;
mod cmsgpack;
mod numconv;
mod structlib;

pub use cjson::MAX_ENCODED_BYTES;
pub use cmsgpack::MAX_PACKED_BYTES;

/// Registers `cjson`, `cmsgpack`, `bit` and `struct` as globals of `lua`, as Redis 7.0 does
/// for its scripting VM. Call it before the sandbox makes globals read-only.
pub fn load_libraries(lua: &mlua::Lua) -> mlua::Result<()> {
    let g = lua.globals();
    g.raw_set("cjson", cjson::create(lua)?)?;
    g.raw_set("cmsgpack", cmsgpack::create(lua)?)?;
    g.raw_set("bit", bit::create(lua)?)?;
    g.raw_set("struct", structlib::create(lua)?)?;
    Ok(())
}
