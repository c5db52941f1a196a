-- sluicegate for LuaJIT / OpenResty, through the FFI: a thin module over libsluicegate.
--
--   local sg = require("sluicegate")
--   local per_ip = assert(sg.keyed("10/s; burst=20", 100000))   -- once per worker
--   local d, err = per_ip:acquire(ngx.var.binary_remote_addr, 1) -- per request
--
-- One limit for all the workers of the host: keep the buckets in a shared-memory region,
--   local per_ip = assert(sg.keyed("10/s; burst=20", 100000, nil, "shm:/api-limits"))
--
-- The declarations below are copied from include/sluicegate.h (the subset this module
-- uses); the test suite checks every one of them against the header, so they cannot drift.
local ffi = require("ffi")

ffi.cdef[[
enum sg_result {
  SG_OK = 0,
  SG_ERR_NULL_ARGUMENT = 1,
  SG_ERR_WRONG_HANDLE = 2,
  SG_ERR_PANIC = 3,
  SG_ERR_INVALID_ARGUMENT = 4,
  SG_ERR_BUFFER_TOO_SMALL = 5,
  SG_ERR_INVALID_QUOTA = 100,
  SG_ERR_PARSE = 101,
  SG_ERR_INSUFFICIENT_CAPACITY = 102,
  SG_ERR_CLOCK_OUT_OF_RANGE = 103,
  SG_ERR_KEY_STORE_FULL = 104,
  SG_ERR_INVALID_OPTION = 105,
  SG_ERR_STORE_UNAVAILABLE = 106,
  SG_ERR_STORE_MISMATCH = 107,
  SG_ERR_STORE_CORRUPT = 108,
  SG_ERR_STORE_PERMISSION = 109,
  SG_ERR_STORE_UNSUPPORTED = 110,
  SG_ERR_STORE_TIMEOUT = 111,
  SG_ERR_OTHER = 199,
};
typedef uint32_t sg_result;
enum sg_header_style {
  SG_HEADERS_IETF = 0,
  SG_HEADERS_DRAFT6 = 1,
  SG_HEADERS_DRAFT7 = 2,
  SG_HEADERS_LEGACY = 3,
  SG_HEADERS_NONE = 4,
};
typedef uint32_t sg_header_style;
enum sg_on_full {
  SG_ON_FULL_REJECT_NEW_KEYS = 0,
  SG_ON_FULL_EVICT_FULLEST = 1,
};
typedef uint32_t sg_on_full;
typedef struct sg_keyed_limiter sg_keyed_limiter;
typedef struct sg_manual_clock sg_manual_clock;
typedef struct sg_quota sg_quota;
typedef struct sg_decision {
  bool allowed;
  uint64_t limit;
  uint64_t remaining;
  uint64_t retry_after_ns;
  uint64_t reset_after_ns;
  uint64_t window_s;
  bool shadow_rejected;
} sg_decision;
const char *sg_version(void);
const char *sg_result_name(uint32_t code);
sg_result sg_last_error_message(char *buf, size_t len, size_t *out_written);
sg_result sg_manual_clock_new(uint64_t start_ns, struct sg_manual_clock **out);
sg_result sg_manual_clock_advance(const struct sg_manual_clock *clock, uint64_t ns);
void sg_manual_clock_free(struct sg_manual_clock *clock);
sg_result sg_quota_parse(const char *rate, struct sg_quota **out);
void sg_quota_free(struct sg_quota *quota);
sg_result sg_keyed_limiter_new(const struct sg_quota *quota, uint64_t max_keys, uint32_t on_full, struct sg_keyed_limiter **out);
sg_result sg_keyed_limiter_new_with_clock(const struct sg_quota *quota, uint64_t max_keys, uint32_t on_full, const struct sg_manual_clock *clock, struct sg_keyed_limiter **out);
sg_result sg_keyed_limiter_new_in_store(const struct sg_quota *quota, const char *store, uint64_t max_keys, uint32_t on_full, const struct sg_manual_clock *clock, struct sg_keyed_limiter **out);
sg_result sg_keyed_limiter_try_acquire(const struct sg_keyed_limiter *limiter, const uint8_t *key, size_t key_len, uint64_t cost, struct sg_decision *out);
sg_result sg_keyed_limiter_len(const struct sg_keyed_limiter *limiter, uint64_t *out_len);
void sg_keyed_limiter_free(struct sg_keyed_limiter *limiter);
sg_result sg_decision_headers(const struct sg_decision *decision, uint32_t style, const uint8_t *policy, size_t policy_len, char *buf, size_t len, size_t *out_written);
]]

local lib = ffi.load(os.getenv("SLUICEGATE_LIB") or "sluicegate")
local C = lib

local M = { lib = lib }

-- The error of the last failing call on this thread, as "name: detail".
local function last_error(rc)
  local buf = ffi.new("char[?]", 1024)
  lib.sg_last_error_message(buf, 1024, nil)
  return ffi.string(lib.sg_result_name(rc)) .. ": " .. ffi.string(buf)
end

function M.version()
  return ffi.string(lib.sg_version())
end

-- A manual clock (tests, simulations); nil for the default clock.
function M.manual_clock(start_ns)
  local out = ffi.new("sg_manual_clock *[1]")
  local rc = lib.sg_manual_clock_new(start_ns or 0, out)
  if rc ~= C.SG_OK then return nil, last_error(rc) end
  return ffi.gc(out[0], lib.sg_manual_clock_free)
end

local Keyed = {}
Keyed.__index = Keyed

-- The key bound when none is given (as the other bindings' default).
local DEFAULT_MAX_KEYS = 1048576

-- Whether `n` is a Lua number holding a whole number exactly (below 2^53 in magnitude): a
-- fraction or a huge number given to a uint64_t argument would be truncated by the FFI (a cost
-- of 0.9 would be 0, a peek that admits everything).
local function whole(n)
  return type(n) == "number" and n == math.floor(n) and math.abs(n) < 2^53
end

-- A keyed limiter: one bucket per key (any Lua string, binary included).
-- Returns nil, "parse_error: invalid rate ..." for a bad rate string.
-- `clock`: a manual clock, or nil for the default clock. `store`: nil or "memory" (this
-- process), or "shm:NAME" (a shared-memory region: every worker of the host that opens
-- NAME shares its buckets; errors such as "store_mismatch: ..." when it holds another quota).
-- `max_keys` nil with a store: the region's own capacity (or the store string's
-- `?capacity=N`, or the default for a new region).
function M.keyed(rate, max_keys, clock, store)
  if type(rate) ~= "string" then
    return nil, "invalid_argument: the rate must be a string such as \"10/s; burst=20\""
  end
  local given = max_keys
  max_keys = max_keys or DEFAULT_MAX_KEYS
  if not whole(max_keys) or max_keys < 1 then
    return nil, "invalid_argument: max_keys must be a whole number, 1 or more, not " .. tostring(max_keys)
  end
  local q = ffi.new("sg_quota *[1]")
  local rc = lib.sg_quota_parse(rate, q)
  if rc ~= C.SG_OK then return nil, last_error(rc) end
  local out = ffi.new("sg_keyed_limiter *[1]")
  if store then
    rc = lib.sg_keyed_limiter_new_in_store(q[0], store, given or 0, C.SG_ON_FULL_EVICT_FULLEST, clock, out)
  elseif clock then
    rc = lib.sg_keyed_limiter_new_with_clock(q[0], max_keys, C.SG_ON_FULL_EVICT_FULLEST, clock, out)
  else
    rc = lib.sg_keyed_limiter_new(q[0], max_keys, C.SG_ON_FULL_EVICT_FULLEST, out)
  end
  lib.sg_quota_free(q[0])
  if rc ~= C.SG_OK then return nil, last_error(rc) end
  return setmetatable({ handle = ffi.gc(out[0], lib.sg_keyed_limiter_free),
                        d = ffi.new("sg_decision") }, Keyed)
end

-- A key's bytes: a string as it is; an integer as its decimal digits, the key rule of
-- every binding (42 here, 42 and "42" in Python or Node name one bucket).
local function key_bytes(key)
  if type(key) == "string" then return key end
  if whole(key) then return string.format("%d", key) end
  return nil
end

-- `cost` (nil: 1) as the library takes it, or nil when it is not a whole number of tokens.
local function cost_of(cost)
  if cost == nil then return 1 end
  if whole(cost) and cost >= 0 then return cost end
  return nil
end

-- The decision for `cost` tokens of `key` (a string or an integer): a table {allowed,
-- limit, remaining, retry_after (seconds, a Lua number), reset_after}, or nil and an error
-- string.
function Keyed:acquire(key, cost)
  local d = self.d
  local bytes = key_bytes(key)
  if bytes == nil then
    return nil, "invalid_argument: a key is a string or a whole number below 2^53, not " .. tostring(key)
  end
  local c = cost_of(cost)
  if c == nil then
    return nil, "invalid_argument: cost must be a whole number of tokens, 0 or more, not " .. tostring(cost)
  end
  local rc = lib.sg_keyed_limiter_try_acquire(self.handle, bytes, #bytes, c, d)
  if rc ~= C.SG_OK then return nil, last_error(rc) end
  return {
    allowed = d.allowed,
    limit = tonumber(d.limit),
    remaining = tonumber(d.remaining),
    retry_after = tonumber(d.retry_after_ns) / 1e9,
    reset_after = tonumber(d.reset_after_ns) / 1e9,
  }
end

-- The HTTP response fields of the last decision `acquire` returned, as a table
-- {name = value}: the IETF RateLimit-Policy / RateLimit fields naming `policy`, and
-- Retry-After on a denial, rendered by the library (sg_decision_headers).
function Keyed:headers(policy)
  policy = policy or "default"
  if type(policy) ~= "string" then
    return nil, "invalid_argument: the policy name must be a string, not " .. tostring(policy)
  end
  local cap = 4 * #policy + 256
  local buf, n = ffi.new("char[?]", cap), ffi.new("size_t[1]")
  local rc = lib.sg_decision_headers(self.d, C.SG_HEADERS_IETF, policy, #policy, buf, cap, n)
  if rc ~= C.SG_OK then return nil, last_error(rc) end
  local fields = {}
  for name, value in ffi.string(buf, n[0]):gmatch("([^:\r\n]+): ([^\r\n]*)\r\n") do
    fields[name] = value
  end
  return fields
end

-- The number of keys held, or nil and an error string.
function Keyed:len()
  local n = ffi.new("uint64_t[1]")
  local rc = lib.sg_keyed_limiter_len(self.handle, n)
  if rc ~= C.SG_OK then return nil, last_error(rc) end
  return tonumber(n[0])
end

return M
