-- The OpenResty access handler of handler.lua run outside nginx, with a stand-in `ngx`
-- (ngx_stub.lua) and a manual clock, so every outcome is exact and checked, after a drift
-- check of the module's declarations against the header; then its errors and the key rule.
--
-- Run: SLUICEGATE_LIB=target/c/lib/libsluicegate.so luajit examples/luajit/test_handler.lua
local dir = arg and arg[0]:match("^(.*)/[^/]*$") or "."
package.path = dir .. "/?.lua;" .. package.path
local sg = require("sluicegate")

local passed, failed = 0, 0
local function check(cond, what)
  if cond then passed = passed + 1 else failed = failed + 1; io.stderr:write("FAILED: ", what, "\n") end
end

-- Drift check, first: every declaration of the module's cdef appears in the committed header
-- (a struct that differs would have the library write past LuaJIT's copy of it).
local header_path = os.getenv("SLUICEGATE_HEADER")
if header_path then
  local h = assert(io.open(header_path)):read("*a")
  local src = assert(io.open(dir .. "/sluicegate.lua")):read("*a")
  local cdef = src:match("ffi%.cdef%[%[(.-)%]%]")
  local function normalize(s)
    s = s:gsub("/%*.-%*/", " "):gsub("//[^\n]*", " ")
    s = s:gsub("#ifdef __cplusplus.-#endif[^\n]*", " ")   -- C++-only parts
    s = s:gsub("\n#[^\n]*", "\n")                          -- other preprocessor lines
    s = s:gsub("%s+", " "):gsub(" ?([%(%)%*,;{}]) ?", "%1")
    return s
  end
  local hn = normalize(h)
  local n = 0
  for decl in normalize(cdef):gmatch("[^;{}]*%b{}[^;]*;") do   -- struct and enum definitions
    n = n + 1
    decl = decl:match("^%s*(.-)%s*$")
    check(hn:find(decl, 1, true) ~= nil, "header has: " .. decl)
  end
  for decl in normalize(cdef):gsub("[^;{}]*%b{}[^;]*;", ""):gmatch("[^;]+;") do
    n = n + 1
    decl = decl:match("^%s*(.-)%s*$")
    check(hn:find(decl, 1, true) ~= nil, "header has: " .. decl)
  end
  print(string.format("cdef drift check: %d declarations compared with %s", n, header_path))
end
if failed > 0 then
  print(string.format("luajit example: the cdef drifted from the header (%d failed)", failed))
  os.exit(1)
end

local access = require("handler").access
local request = require("ngx_stub")

local clock = assert(sg.manual_clock(0))
local limiter = assert(sg.keyed("10/s; burst=2", 100000, clock))

local statuses = {}
for i = 1, 3 do
  local ngx, status = request("192.0.2.1")
  access(limiter, ngx)
  statuses[i] = status()
  print(string.format("request %d from 192.0.2.1: %d  RateLimit: %s%s", i, status(),
    ngx.header["RateLimit"], ngx.header["Retry-After"] and ("  Retry-After: " .. ngx.header["Retry-After"]) or ""))
  if i == 3 then
    check(ngx.header["Retry-After"] == "1", "Retry-After is 1 s")
    check(ngx.header["RateLimit"] == '"per-ip";r=0;t=1', "RateLimit on the denial")
    check(ngx.header["RateLimit-Policy"] == '"per-ip";q=2;w=1', "RateLimit-Policy")
  end
end
check(statuses[1] == 200 and statuses[2] == 200 and statuses[3] == 429, "200, 200, 429")

-- Another client has its own bucket; binary keys (ngx.var.binary_remote_addr) work too.
local ngx2, status2 = request("\192\0\2\2")
access(limiter, ngx2)
check(status2() == 200, "a second client is admitted")
check(limiter:len() == 2, "two keys held")

-- 100 ms later the first client has one token again.
sg.lib.sg_manual_clock_advance(clock, 100000000)
local ngx3, status3 = request("192.0.2.1")
access(limiter, ngx3)
check(status3() == 200, "admitted after the wait")

-- Errors come back as values with the core's code and detail.
local bad, err = sg.keyed("10/fortnight", 10)
check(bad == nil and err:match("^parse_error: invalid rate") ~= nil, "parse error reported")
print("bad rate: " .. tostring(err))
local d, err2 = limiter:acquire("192.0.2.9", 3)
check(d == nil and err2:match("^insufficient_capacity") ~= nil, "cost above burst reported")

-- A bad store string, and a region that cannot be opened, are errors too.
local _, err3 = sg.keyed("10/s", 10, nil, "redis")
check(err3 and err3:match("^invalid_option: ") ~= nil, "bad store reported: " .. tostring(err3))
local _, err4 = sg.keyed("10/s", 10, nil, "shm:/nonexistent-directory-of-sluicegate/region")
check(err4 and err4:match("^store_unavailable: ") ~= nil, "missing directory: " .. tostring(err4))

-- No max_keys with a store: the store string's capacity, or the region's own (the default
-- was sent as max_keys, which a ?capacity=N or an existing region of another size refused).
local region = os.tmpname()
os.remove(region) -- a name no file has: the region is made there
local sized, err5 = sg.keyed("10/s", nil, nil, "shm:" .. region .. "?capacity=8")
check(sized ~= nil, "a capacity in the store string: " .. tostring(err5))
local again, err6 = sg.keyed("10/s", nil, nil, "shm:" .. region)
check(again ~= nil, "the region's own capacity: " .. tostring(err6))
sized, again = nil, nil
collectgarbage()
os.remove(region)

-- An integer key is its decimal digits: 42 and "42" are one bucket, one key.
local ids = assert(sg.keyed("1/h; burst=2", 10, clock))
check(ids:acquire(42, 1).allowed and ids:acquire("42", 1).allowed, "42 and \"42\" admitted")
check(not ids:acquire(42, 1).allowed, "the shared bucket is empty")
check(ids:len() == 1, "42 and \"42\" are one key")

-- Arguments the FFI would convert silently are refused: a fractional cost was truncated to 0
-- (a peek, so an exhausted bucket admitted every request), and a key that is neither a string
-- nor a whole number, a missing key bound or policy name raised a Lua error.
local spent = assert(sg.keyed("1/minute; burst=1", 10, clock))
check(spent:acquire("c", 1).allowed and not spent:acquire("c", 1).allowed, "one token, spent")
for _, cost in ipairs({0.9, 1.5, -1, 2^53, 0/0, "1"}) do
  local d5, e5 = spent:acquire("c", cost)
  check(d5 == nil and tostring(e5):find("^invalid_argument: cost") ~= nil, "cost " .. tostring(cost) .. " refused: " .. tostring(e5))
end
for _, key in ipairs({1.5, 2^53, true, {}}) do
  local d6, e6 = spent:acquire(key, 1)
  check(d6 == nil and tostring(e6):find("^invalid_argument: a key") ~= nil, "key " .. tostring(key) .. " refused")
end
local d7 = spent:acquire(nil, 1)
check(d7 == nil, "a nil key refused")
local defaults = assert(sg.keyed("5/s"))
check(defaults:acquire("k").allowed, "the key bound has a default")
check(defaults:headers()["RateLimit-Policy"] ~= nil, "the policy name has a default")
check(sg.keyed(nil) == nil and sg.keyed("5/s", 0) == nil and sg.keyed("5/s", 1.5) == nil, "a bad rate or key bound is an error value")

-- The default clock works as well.
local live = assert(sg.keyed("1000/s", 10))
check(live:acquire("k", 1).allowed, "default clock admits")

print(string.format("luajit example (libsluicegate %s): %d passed, %d failed", sg.version(), passed, failed))
os.exit(failed == 0 and 0 or 1)
