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

-- A keyed limiter: one bucket per key (any Lua string, binary included).
-- Returns nil, "parse_error: invalid rate ..." for a bad rate string.
-- `clock`: a manual clock, or nil for the default clock. `store`: nil or "memory" (this
-- process), or "shm:NAME" (a shared-memory region: every worker of the host that opens
-- NAME shares its buckets; errors such as "store_mismatch: ..." when it holds another quota).
function M.keyed(rate, max_keys, clock, store)
  local q = ffi.new("sg_quota *[1]")
  local rc = lib.sg_quota_parse(rate, q)
  if rc ~= C.SG_OK then return nil, last_error(rc) end
  local out = ffi.new("sg_keyed_limiter *[1]")
  if store then
    rc = lib.sg_keyed_limiter_new_in_store(q[0], store, max_keys, C.SG_ON_FULL_EVICT_FULLEST, clock, out)
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
  if type(key) == "number" and key == math.floor(key) and math.abs(key) < 2^53 then
    return string.format("%d", key)
  end
  return key
end

-- The decision for `cost` tokens of `key` (a string or an integer): a table {allowed,
-- limit, remaining, retry_after (seconds, a Lua number), reset_after}, or nil and an error
-- string.
function Keyed:acquire(key, cost)
  local d = self.d
  key = key_bytes(key)
  local rc = lib.sg_keyed_limiter_try_acquire(self.handle, key, #key, cost or 1, d)
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

function Keyed:len()
  local n = ffi.new("uint64_t[1]")
  lib.sg_keyed_limiter_len(self.handle, n)
  return tonumber(n[0])
end

return M
