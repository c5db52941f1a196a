-- sluicegate: the request (SCRIPTS.md, "Calling convention"). One call decides one request
-- over one or more buckets (a composite limit is several KEYS), all-or-nothing, atomically:
--
--   FCALL name n key_1 .. key_n op cost bound test_clock spec_1 .. spec_n
--   EVALSHA sha n key_1 .. key_n op cost bound test_clock spec_1 .. spec_n
--
-- entry_function.lua or entry_eval.lua follows this file and calls run.

local ALGOS = { tb = TB, ti = TI, gcra = GC, fw = FW, sw = SW, sl = LOG, lq = LQ }

-- The production clock: microseconds since 2024-01-01T00:00:00Z (SCRIPTS.md, "Clock").
local EPOCH_S = 1704067200
local EPOCH_MS = 1704067200000
local TICKS_PER_MS = 1000

-- (now in ticks, ticks per millisecond, the Unix millisecond of tick 0).
local function clock(test)
  if test == '' then
    if redis.replicate_commands then redis.replicate_commands() end -- no-op from Redis 5 on
    local tm = redis.call('TIME')
    local s = tonumber(tm[1]) - EPOCH_S
    if s < 0 then fail('the server clock reads before 2024-01-01') end
    return add(mul(s, 1000000), tonumber(tm[2])), TICKS_PER_MS, EPOCH_MS  -- a number until 2309
  end
  -- Tests only: 'now ticks_per_ms base_ms', and ' exact' to turn the fast paths off
  -- (SCRIPTS.md, "Test clock").
  local now, tpm, base, exact = test:match('^(%d+) (%d+) (%d+)(.*)$')
  if not now or (exact ~= '' and exact ~= ' exact') then fail('bad test clock: ' .. test) end
  if exact ~= '' then FAST = false end
  return N(now), N(tpm), N(base)
end

-- A composite part's state after its acquisition is refunded (nil: as before).
local function undo(p, new, t, cost)
  if p.A.undo then return p.A.undo(p.P, p.cur, new, t, cost) end
  local fin = p.A.refund(p.P, new, t, cost) or new
  if p.A.enc(fin) == p.A.enc(p.cur) then return nil end
  return fin
end

local function flag(b) if b then return 1 end return 0 end

-- A figure in a reply: an integer reply below 2^53, else a string of decimal digits.
local function R(x) if type(x) == 'number' then return x end return S(x) end

local function run(keys, argv)
  local op = argv[1]
  if op ~= 'acquire' and op ~= 'peek' and op ~= 'refund' then
    fail('unknown op: ' .. tostring(op))
  end
  local n = #keys
  if n < 1 or #argv ~= 4 + n then fail('expected 4 arguments and one spec per key') end
  local cost = N(argv[2])
  local bound = nil
  if argv[3] ~= '' then bound = N(argv[3]) end
  local parts, seen = {}, {}
  for i = 1, n do
    if seen[keys[i]] then fail('a key appears twice: ' .. keys[i]) end
    seen[keys[i]] = true
    local name, rest = argv[4 + i]:match('^(%l+) (.*)$')
    local A = ALGOS[name or '']
    if not A then fail('unknown algorithm in spec: ' .. argv[4 + i]) end
    parts[i] = { A = A, P = A.parse(rest), key = keys[i] }
  end
  FAST = true
  local t, tpm, base = clock(argv[4])

  if op ~= 'refund' then
    for i = 1, n do
      local cap = parts[i].A.cap(parts[i].P)
      if lt(cap, cost) then return { 1, R(t), i, R(cap) } end  -- insufficient capacity
    end
  end

  for i = 1, n do
    local p = parts[i]
    p.st = p.A.load(p.key)
    p.cur = p.st or p.A.fresh(p.P, t)
  end

  local writes = {}
  local ds = {}
  local allowed = true
  if op == 'refund' then
    for i = 1, n do
      local p = parts[i]
      if p.st ~= nil then writes[i] = p.A.refund(p.P, p.st, t, cost) end
    end
  else
    local j = nil
    local news = {}
    for i = 1, n do
      local p = parts[i]
      local d, new = p.A.decide(p.P, p.cur, t, cost, bound)
      ds[i] = d
      if not d[1] then
        j = i
        break
      end
      news[i] = new
    end
    if j == nil then
      for i = 1, n do writes[i] = news[i] end
    else
      -- Part j rejects: the parts before it give the cost back and are read as a peek, the
      -- parts after it as the decision the request would get (SEMANTICS.md).
      allowed = false
      for i = 1, j - 1 do
        local p = parts[i]
        local view = p.cur
        if news[i] ~= nil then
          local fin = undo(p, news[i], t, cost)
          if fin ~= nil then
            writes[i] = fin
            if p.A.view then view = p.A.view(p.cur, fin) else view = fin end
          end
        end
        ds[i] = p.A.decide(p.P, view, t, 0, bound)
      end
      for i = j + 1, n do
        local p = parts[i]
        ds[i] = p.A.decide(p.P, p.cur, t, cost, bound)
      end
    end
    if op == 'acquire' then
      -- A request (even of cost 0) creates an absent bucket, as in-process: its fresh state
      -- is written, so that a later request with an earlier reading is clamped to this one
      -- (a fresh full bucket's key expires with this reading's millisecond). The sliding log
      -- writes only admissions (SCRIPTS.md, "Absent keys").
      for i = 1, n do
        local p = parts[i]
        if p.st == nil and writes[i] == nil and (p.A ~= LOG or p.A.creates(p.P)) then
          writes[i] = p.cur
        end
      end
    else
      writes = {}
    end
  end

  for i = 1, n do
    local w = writes[i]
    if w ~= nil then
      local p = parts[i]
      local num, den = p.A.full_at(p.P, w)
      -- Never before this reading's millisecond (a state already full at an earlier instant).
      local at = cdiv(num, mul(den, tpm))
      local now_ms = cdiv(t, tpm)
      if lt(at, now_ms) then at = now_ms end
      p.A.store(p.key, p.P, w, add(base, at))
    end
  end

  if op == 'refund' then return { 0, R(t) } end

  -- The tightest part (least remaining, the first on ties), the longest waits.
  local tight = ds[1]
  local retry, reset = ds[1][4], ds[1][5]
  for i = 2, n do
    local d = ds[i]
    if lt(d[3], tight[3]) then tight = d end
    retry = imax(retry, d[4])
    reset = imax(reset, d[5])
  end
  local out = { 0, R(t), flag(allowed), R(tight[2]), R(tight[3]), R(retry), R(reset) }
  if n > 1 then
    for i = 1, n do
      local d = ds[i]
      out[#out + 1] = flag(d[1])
      out[#out + 1] = R(d[2])
      out[#out + 1] = R(d[3])
      out[#out + 1] = R(d[4])
      out[#out + 1] = R(d[5])
    end
  end
  return out
end
