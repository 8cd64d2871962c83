-- The environment Redis 7.0 gives scripts, built once per Lua VM by `vm.rs` (chunk "=prefixkv").
-- Arguments: `bridge`, a table the Rust side fills for FUNCTION LOAD (`registered`, `loading`),
-- and `rust`, the Rust helpers (`call`, `pcall`, `sha1hex`, `log`, `setresp`, `set_repl`,
-- `acl_check_cmd`, `rand48`, `srand48`, `handler`, `error_value`). Returns the globals proxy of
-- scripts, the environment of function libraries, the runner (FUNCTION LOAD) and `run` (a
-- script or function run: KEYS/ARGV in, globals cleared after, in one call from Rust).
local bridge, rust = ...
local error_value = rust.error_value

local error, type, tostring, tonumber, select, setmetatable, rawget, pairs, ipairs =
  error, type, tostring, tonumber, select, setmetatable, rawget, pairs, ipairs
local floor, ceil = math.floor, math.ceil
local setfenv, loadstring, load, xpcall = setfenv, loadstring, load, xpcall
local string_sub, string_find, string_byte = string.sub, string.find, string.byte

local function readonly()
  error("Attempt to modify a readonly table", 2)
end

-- A read-only view of `t`: reads go through, writes fail as on Redis's read-only tables.
local function protect(t)
  return setmetatable({}, { __index = t, __newindex = readonly, __metatable = false })
end

-- An error Redis raises from its C helpers: a table whose `err` has an error code.
local function raise(message)
  error({ err = "ERR " .. message }, 0)
end

local function copy(t)
  local out = {}
  for k, v in pairs(t) do out[k] = v end
  return out
end

local redis = {}
-- `redis.call` and `redis.pcall` are Rust functions made once per VM that reach only the run in
-- progress (`vm.rs`, `RunSlot`): C functions, so `return redis.call(...)` keeps the script's
-- frame (and its line in error messages).
redis.call = rust.call
redis.pcall = rust.pcall
redis.error_reply = function(...)
  local message = ...
  if select('#', ...) ~= 1 or type(message) ~= 'string' then
    return { err = "ERR wrong number or type of arguments" }
  end
  if string_byte(message, 1) ~= 45 then message = "-" .. message end -- 45 is '-'
  local space = string_find(message, " ", 1, true)
  local line
  if space then
    line = string_sub(message, 2, space - 1) .. " " .. string_sub(message, space + 1)
  else
    line = "ERR " .. string_sub(message, 2)
  end
  line = string.gsub(line, "[\r\n]+$", "")
  return { err = line }
end
redis.status_reply = function(...)
  local message = ...
  if select('#', ...) ~= 1 or (type(message) ~= 'string' and type(message) ~= 'number') then
    return { err = "ERR wrong number or type of arguments" }
  end
  return { ok = tostring(message) }
end
-- Helpers that raise are Rust (C) functions, as in Redis: a Lua function called as
-- `return redis.sha1hex()` would be a tail call and lose the script's line in the error.
redis.sha1hex = rust.sha1hex
redis.LOG_DEBUG, redis.LOG_VERBOSE, redis.LOG_NOTICE, redis.LOG_WARNING = 0, 1, 2, 3
redis.log = rust.log
redis.setresp = rust.setresp
redis.REPL_NONE, redis.REPL_AOF, redis.REPL_SLAVE, redis.REPL_REPLICA, redis.REPL_ALL = 0, 1, 2, 2, 3
-- There are no replicas: accepted, checked as Redis checks it, and ignored.
redis.set_repl = rust.set_repl
redis.replicate_commands = function() return true end
redis.breakpoint = function() return false end
redis.debug = function() end
redis.acl_check_cmd = rust.acl_check_cmd
redis.REDIS_VERSION = rust.version
redis.REDIS_VERSION_NUM = rust.version_num

-- What a function library sees of `redis` while FUNCTION LOAD runs it.
local valid_flags = {
  ['no-writes'] = true, ['allow-oom'] = true, ['allow-stale'] = true,
  ['no-cluster'] = true, ['allow-cross-slot-keys'] = true,
}
local loading_redis = {
  log = redis.log, setresp = redis.setresp, sha1hex = redis.sha1hex,
  error_reply = redis.error_reply, status_reply = redis.status_reply,
  LOG_DEBUG = 0, LOG_VERBOSE = 1, LOG_NOTICE = 2, LOG_WARNING = 3,
  REDIS_VERSION = redis.REDIS_VERSION, REDIS_VERSION_NUM = redis.REDIS_VERSION_NUM,
}
loading_redis.register_function = function(...)
  local n = select('#', ...)
  local name, callback, flags, description
  local function stringy(value) return type(value) == 'string' or type(value) == 'number' end
  if n == 1 then
    local named = ...
    if type(named) ~= 'table' then
      raise("calling redis.register_function with a single argument is only applicable to Lua table (representing named arguments).")
    end
    for k, v in pairs(named) do
      if k == 'function_name' then
        if not stringy(v) then raise("function_name argument given to redis.register_function must be a string") end
        name = v
      elseif k == 'callback' then
        if type(v) ~= 'function' then raise("callback argument given to redis.register_function must be a function") end
        callback = v
      elseif k == 'flags' then
        if type(v) ~= 'table' then raise("flags argument to redis.register_function must be a table representing function flags") end
        flags = v
      elseif k == 'description' then
        if not stringy(v) then raise("description argument given to redis.register_function must be a string") end
        description = v
      else raise("unknown argument given to redis.register_function") end
    end
    if name == nil then raise("redis.register_function must get a function name argument") end
    if callback == nil then raise("redis.register_function must get a callback argument") end
  elseif n == 2 then
    name, callback = ...
    if not stringy(name) then raise("first argument to redis.register_function must be a string") end
    if type(callback) ~= 'function' then raise("second argument to redis.register_function must be a function") end
  else
    raise("wrong number of arguments to redis.register_function")
  end
  name = tostring(name)
  if description ~= nil then description = tostring(description) end
  local flag_list = {}
  if flags ~= nil then
    for _, flag in ipairs(flags) do
      if type(flag) ~= 'string' or not valid_flags[flag] then raise("unknown flag given") end
      flag_list[#flag_list + 1] = flag
    end
  end
  if not string_find(name, "^[%w_]+$") then
    raise("Library names can only contain letters, numbers, or underscores(_) and must be at least one character long")
  end
  local registered = bridge.registered
  if registered == nil then raise("redis.register_function can only be called on FUNCTION LOAD command") end
  if registered[name] ~= nil then raise("Function already exists in the library") end
  registered[name] = { callback = callback, flags = flag_list, description = description }
  registered[#registered + 1] = name
end

-- math.random as Redis's: its own rand48, one sequence for the whole server.
local mathlib = copy(math)
local function checkint(position, value)
  local number = tonumber(value)
  if number == nil then
    error("bad argument #" .. position .. " to 'random' (number expected, got " .. type(value) .. ")", 3)
  end
  if number >= 0 then return floor(number) end
  return ceil(number)
end
mathlib.random = function(...)
  local r = (rust.rand48() % 2147483647) / 2147483647
  local n = select('#', ...)
  if n == 0 then return r end
  if n == 1 then
    local upper = checkint(1, (...))
    if upper < 1 then error("bad argument #1 to 'random' (interval is empty)", 2) end
    return floor(r * upper) + 1
  end
  if n == 2 then
    local lower, upper = checkint(1, (...)), checkint(2, (select(2, ...)))
    if lower > upper then error("bad argument #2 to 'random' (interval is empty)", 2) end
    return floor(r * (upper - lower + 1)) + lower
  end
  error("wrong number of arguments", 2)
end
mathlib.randomseed = function(seed)
  rust.srand48(checkint(1, seed))
end

-- The globals scripts see: reads of a missing name and every write fail, as in Redis 7.0.
local globals = {}
local env
local function safe_load(loader)
  return function(chunk, ...)
    if type(chunk) == 'string' and string_byte(chunk, 1) == 27 then
      return nil, "loading precompiled chunks is not allowed"
    end
    local f, message = loader(chunk, ...)
    if f then setfenv(f, env) end
    return f, message
  end
end
for _, name in ipairs({
  "assert", "collectgarbage", "error", "gcinfo", "getmetatable", "ipairs", "next", "pairs",
  "rawequal", "rawget", "rawset", "select", "setmetatable", "tonumber", "tostring",
  "type", "unpack", "_VERSION",
}) do
  globals[name] = _G[name]
end
-- A failed `redis.call` raises a Rust error value: a script's pcall sees it as Redis's table.
-- Redis's pcall: an error table is replaced by its `err` string. A killed script's error is
-- raised again (`killed()` is nil or why the script must stop): catching it does not keep a
-- script alive after SCRIPT KILL.
local killed = rust.killed
local function caught(ok, ...)
  if ok then return ok, ... end
  local stop = killed()
  if stop then error(stop, 0) end
  local problem = ...
  if type(problem) == 'userdata' then problem = error_value(problem) end
  if type(problem) == 'table' and type(rawget(problem, 'err')) == 'string' then
    problem = rawget(problem, 'err')
  end
  return false, problem
end
local raw_pcall, raw_xpcall = pcall, xpcall
globals.pcall = function(f, ...)
  return caught(raw_pcall(f, ...))
end
local function checked(ok, ...)
  if not ok then
    local stop = killed()
    if stop then error(stop, 0) end
  end
  return ok, ...
end
globals.xpcall = function(f, handle)
  return checked(raw_xpcall(f, function(problem)
    if type(problem) == 'userdata' then problem = error_value(problem) end
    return handle(problem)
  end))
end
-- Coroutines are created by Rust (`rust.coroutine`) so that each gets the kill hook (Lua 5.1
-- hooks are per coroutine): SCRIPT KILL stops a loop inside one too.
local coroutines = copy(coroutine)
local raw_resume = coroutine.resume
coroutines.create = rust.coroutine
coroutines.resume = function(co, ...)
  return checked(raw_resume(co, ...))
end
local function packed(...)
  return { n = select('#', ...), ... }
end
local unpack = unpack
coroutines.wrap = function(f)
  local co = rust.coroutine(f)
  return function(...)
    local results = packed(raw_resume(co, ...))
    if results[1] then return unpack(results, 2, results.n) end
    local stop = killed()
  if stop then error(stop, 0) end
    -- As Lua's wrap: a message gets the position of the code that called the coroutine.
    if type(results[2]) == 'string' then error(results[2], 2) end
    error(results[2], 0)
  end
end
globals.loadstring = safe_load(loadstring)
globals.load = safe_load(load)
globals.string = protect(string)
globals.table = protect(table)
globals.math = protect(mathlib)
globals.coroutine = protect(coroutines)
for _, name in ipairs({ "bit", "cjson", "cmsgpack", "struct" }) do
  if type(_G[name]) == 'table' then globals[name] = protect(_G[name]) end
end
local running_redis = protect(redis)
local library_redis = setmetatable({}, {
  __index = function(_, name)
    local value = loading_redis[name]
    if value == nil then
      error("Script attempted to access nonexistent global variable '" .. tostring(name) .. "'", 2)
    end
    return value
  end,
  __newindex = readonly,
  __metatable = false,
})
globals.redis = running_redis

local function missing(_, name)
  local value = globals[name]
  if value == nil then
    error("Script attempted to access nonexistent global variable '" .. tostring(name) .. "'", 2)
  end
  return value
end
env = setmetatable({}, { __index = missing, __newindex = readonly, __metatable = false })
globals._G = env

-- Function libraries: the same globals, with `redis` as it is while loading or running.
local library_env = setmetatable({}, {
  __index = function(t, name)
    if name == 'redis' then
      if bridge.loading then return library_redis end
      return running_redis
    end
    local value = globals[name]
    if value == nil then
      error("Script attempted to access nonexistent global variable '" .. tostring(name) .. "'", 2)
    end
    return value
  end,
  __newindex = readonly,
  __metatable = false,
})

-- Runs `f()` under the error handler (a library's body, FUNCTION LOAD); returns true and the
-- result, or false and an error table ({err=..., source=..., line=...}).
local handler = rust.handler
local function runner(f)
  return xpcall(f, handler)
end

-- One run of a compiled script (`library` false: KEYS and ARGV are globals of the run) or of a
-- function's callback (`library` true: they are its two arguments): `nkeys` keys, then the
-- arguments. Returns what `runner` returns, after emptying the globals proxy (KEYS, ARGV and
-- whatever the script stored with rawset), so nothing of a run reaches the next.
local rawset, next = rawset, next
local function run(f, library, nkeys, ...)
  local all = { ... }
  local keys, argv = {}, {}
  for i = 1, nkeys do keys[i] = all[i] end
  for i = nkeys + 1, #all do argv[i - nkeys] = all[i] end
  local ok, result
  if library then
    ok, result = xpcall(function() return f(keys, argv) end, handler)
  else
    rawset(env, "KEYS", keys)
    rawset(env, "ARGV", argv)
    ok, result = xpcall(f, handler)
  end
  local key = next(env)
  while key ~= nil do
    rawset(env, key, nil)
    key = next(env)
  end
  return ok, result
end

return env, library_env, runner, run
