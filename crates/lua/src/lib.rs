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

/// Bounds on what the libraries produce, beyond Redis's own limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The most bytes one `cjson.encode` or `cmsgpack.pack` call produces; past it the call
    /// fails with an error instead of allocating more (Redis has no such bound: a table that
    /// contains itself several times can ask for exponential output).
    pub max_output_bytes: usize,
}

impl Default for Limits {
    /// 512 MiB, Redis's default `proto-max-bulk-len`: a reply cannot be larger anyway.
    fn default() -> Self {
        Limits {
            max_output_bytes: 512 * 1024 * 1024,
        }
    }
}

/// Registers `cjson`, `cmsgpack`, `bit` and `struct` as globals of `lua`, as Redis 7.0 does
/// for its scripting VM, with the default [`Limits`]. Call it before the sandbox makes globals
/// read-only.
pub fn load_libraries(lua: &mlua::Lua) -> mlua::Result<()> {
    load_libraries_with(lua, Limits::default())
}

/// [`load_libraries`] with explicit [`Limits`].
pub fn load_libraries_with(lua: &mlua::Lua, limits: Limits) -> mlua::Result<()> {
    let g = lua.globals();
    g.raw_set("cjson", cjson::create(lua, limits)?)?;
    g.raw_set("cmsgpack", cmsgpack::create(lua, limits)?)?;
    g.raw_set("bit", bit::create(lua)?)?;
    g.raw_set("struct", structlib::create(lua)?)?;
    Ok(())
}
