-- Pre-forked workers, as OpenResty runs them: a master process forks N workers (here through
-- the FFI), and the workers share the requests. Each worker makes its limiter once
-- (init_worker_by_lua) and runs handler.lua's access handler on every request (with the
-- stand-in `ngx` of ngx_stub.lua). 200 simulated requests from one client under 10/minute:
--
--   store "shm:..."  one bucket for the host: exactly 10 admitted in total
--   store "memory"   a bucket per worker: N x 10 admitted
--
-- Both also with the limiter made by the master before the fork (init_by_lua): a region
-- mapped before fork() is shared by the children, a memory limiter is copied into each.
-- The region lives in a temporary directory, removed at the end.
--
-- Run: SLUICEGATE_LIB=target/c/lib/libsluicegate.so luajit examples/luajit/workers.lua [N]
local dir = arg and arg[0]:match("^(.*)/[^/]*$") or "."
package.path = dir .. "/?.lua;" .. package.path
local ffi = require("ffi")
local bit = require("bit")
local sg = require("sluicegate")
local access = require("handler").access
local request = require("ngx_stub")

ffi.cdef[[
int fork(void);
int pipe(int fds[2]);
long write(int fd, const void *buf, size_t n);
long read(int fd, void *buf, size_t n);
int close(int fd);
int waitpid(int pid, int *status, int options);
void _exit(int status);
char *mkdtemp(char *templ);
]]
local C = ffi.C

local WORKERS = tonumber(arg and arg[1]) or 4
local REQUESTS, RATE, CLIENT = 200, "10/minute", "192.0.2.1"

local passed, failed = 0, 0
local function check(cond, what)
  if cond then passed = passed + 1 else failed = failed + 1; io.stderr:write("FAILED: ", what, "\n") end
end

-- The limiter of one worker (init_worker_by_lua_block) or of the master (init_by_lua_block).
local function make_limiter(store)
  return assert(sg.keyed(RATE, 1000, nil, store))
end

-- Worker `w` (0-based) handles requests w+1, w+1+N, ...: its share of the 200. Returns the
-- number admitted (status 200).
local function serve(w, limiter)
  local admitted = 0
  for _ = w + 1, REQUESTS, WORKERS do
    local ngx, status = request(CLIENT)
    access(limiter, ngx)
    if status() == 200 then admitted = admitted + 1 end
  end
  return admitted
end

-- Forks the workers and returns the admissions of each (a list), or nil and why.
local function run(store, before_fork)
  local inherited = before_fork and make_limiter(store) or nil
  local fds, gate = ffi.new("int[2]"), ffi.new("int[2]")
  assert(C.pipe(fds) == 0 and C.pipe(gate) == 0, "pipe")
  io.stdout:flush()
  local pids = {}
  for w = 0, WORKERS - 1 do
    local pid = C.fork()
    assert(pid >= 0, "fork")
    if pid == 0 then
      C.close(fds[0])
      C.close(gate[1])
      local byte = ffi.new("char[1]")
      while C.read(gate[0], byte, 1) > 0 do end -- end of file: every worker starts at once
      local ok, n = pcall(function() return serve(w, inherited or make_limiter(store)) end)
      local line = ok and string.format("%d %d\n", w, n) or string.format("%d error %s\n", w, tostring(n))
      C.write(fds[1], line, #line) -- one short write: atomic on a pipe
      C._exit(ok and 0 or 1)
    end
    pids[#pids + 1] = pid
  end
  C.close(fds[1])
  C.close(gate[0])
  C.close(gate[1]) -- opens the gate
  local buf, text = ffi.new("char[4096]"), {}
  while true do
    local n = tonumber(C.read(fds[0], buf, 4096))
    if n <= 0 then break end
    text[#text + 1] = ffi.string(buf, n)
  end
  C.close(fds[0])
  local clean = true
  for _, pid in ipairs(pids) do
    local status = ffi.new("int[1]")
    clean = C.waitpid(pid, status, 0) == pid and bit.band(status[0], 0xffff) == 0 and clean
  end
  local per = {}
  for w, n in table.concat(text):gmatch("(%d+) (%d+)\n") do per[tonumber(w) + 1] = tonumber(n) end
  if not clean or #per ~= WORKERS then return nil, "a worker failed: " .. table.concat(text) end
  return per
end

local function total(per)
  local sum = 0
  for _, n in ipairs(per) do sum = sum + n end
  return sum
end

-- A private directory for the region.
local tmpl = (os.getenv("TMPDIR") or "/tmp") .. "/sluicegate-lua-XXXXXX"
local dirbuf = ffi.new("char[?]", #tmpl + 1, tmpl)
assert(C.mkdtemp(dirbuf) ~= nil, "mkdtemp")
local region_dir = ffi.string(dirbuf)
local regions = {}
local function region(name)
  regions[#regions + 1] = region_dir .. "/" .. name
  return "shm:" .. regions[#regions]
end

for _, case in ipairs({
  { store = region("made-in-workers"), before_fork = false, want = 10 },
  { store = region("made-before-fork"), before_fork = true, want = 10 },
  { store = "memory", before_fork = false, want = WORKERS * 10 },
  { store = "memory", before_fork = true, want = WORKERS * 10 },
}) do
  local kind = case.store == "memory" and "memory" or "shm"
  local where = case.before_fork and "made by the master before the fork" or "made in each worker"
  local per, err = run(case.store, case.before_fork)
  check(per ~= nil, err or "")
  if per then
    print(string.format("%-6s limiter %-34s %2d of %d requests admitted (per worker: %s)",
      kind, where, total(per), REQUESTS, table.concat(per, " ")))
    check(total(per) == case.want, string.format("%s, %s: %d admitted, want %d", kind, where, total(per), case.want))
  end
  if kind == "shm" then
    -- The master opens the same region: the client's bucket is empty for every process.
    local l = make_limiter(case.store)
    local d = assert(l:acquire(CLIENT, 1))
    check(not d.allowed and l:len() == 1, "the master sees the region's empty bucket")
  end
end

collectgarbage() -- unmaps the master's limiters before their files go
for _, path in ipairs(regions) do os.remove(path) end
check(os.remove(region_dir), "the region directory is removed (empty)")

print(string.format("luajit workers (%d pre-forked, libsluicegate %s): %d passed, %d failed",
  WORKERS, sg.version(), passed, failed))
os.exit(failed == 0 and 0 or 1)
