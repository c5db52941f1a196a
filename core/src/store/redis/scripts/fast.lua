-- sluicegate: the common request by a function of its own (SCRIPTS.md, "The one-bucket
-- functions"): one bucket of a continuous token bucket ('tb') or GCRA ('gcra'), op acquire,
-- no bound.
--
--   FCALL NAME_tb 1 key cost k p b i [test_clock]
--   FCALL NAME_gcra 1 key cost k p b i [test_clock]
--
-- is `FCALL NAME 1 key acquire cost '' test_clock 'tb k p b i'` (resp. 'gcra ...'): the same
-- decision, the same write, the same reply. The spec's numbers come as arguments of their
-- own, so nothing is parsed but them; the arithmetic is the fast path of TB.decide and
-- GC.decide, inlined. What that path cannot take (a value that might reach 2^53, an argument
-- or a stored value that is not an integer Lua reads exactly, the test clock's ' exact') goes
-- to run, which decides it exactly or fails as the general call does.

local ceil = math.ceil

-- The argument list of the general call that this one stands for.
local function general(algo, argv)
  return { 'acquire', argv[1] or '', '', argv[6] or '',
           algo .. ' ' .. (argv[2] or '') .. ' ' .. (argv[3] or '') .. ' ' .. (argv[4] or '')
             .. ' ' .. (argv[5] or '') }
end

local function one(algo, keys, argv)
  local cost, k, p, b, i = tonumber(argv[1]), tonumber(argv[2]), tonumber(argv[3]),
    tonumber(argv[4]), tonumber(argv[5])
  -- Integers (x % 1 == 0 fails for NaN and infinities too) with b * p < 2^51, so that every
  -- value below stays under 2^53 once the reading passes the guard further down.
  if not (cost and k and p and b and i and #keys == 1 and #argv <= 6
      and cost >= 0 and k >= 1 and p >= 1 and b >= 1 and i >= 0 and i <= b
      and cost % 1 == 0 and k % 1 == 0 and p % 1 == 0 and b % 1 == 0 and i % 1 == 0
      and b * p < TWO53 / 4) then
    return run(keys, general(algo, argv))
  end
  local t, tpm, base
  local test = argv[6]
  if test == nil then
    local tm = redis.call('TIME')
    t = (tonumber(tm[1]) - EPOCH_S) * 1000000 + tonumber(tm[2])
    if t < 0 then fail('the server clock reads before 2024-01-01') end
    tpm, base = TICKS_PER_MS, EPOCH_MS
  else
    local a, c, d = test:match('^(%d+) (%d+) (%d+)$')
    t, tpm, base = tonumber(a), tonumber(c), tonumber(d)
    if not (t and t < TWO53 and tpm and tpm >= 1 and base and base < TWO53) then
      return run(keys, general(algo, argv))
    end
  end
  if cost > b then return { 1, t, 1, b } end   -- insufficient capacity
  local key = keys[1]
  local bp = b * p
  local v = redis.call('GET', key)
  local f
  if v then
    f = tonumber(v)
    if not (f and f >= 0 and f < TWO53 and f % 1 == 0) then
      return run(keys, general(algo, argv))
    end
  else
    f = t * k + (b - i) * p
  end
  local tk = t * k
  local top = f
  if tk > top then top = tk end
  if not (tk < TWO53 and top + 2 * bp < TWO53 and k * tpm < TWO53) then
    return run(keys, general(algo, argv))
  end
  -- Every value below is a non-negative integer of at most max(F, t*k) + 2 * bp < 2^53, and
  -- floor(x / y), ceil(x / y) of such integers are exact (SCRIPTS.md, "Exactness").
  local ok, rem, retry, reset, new
  if algo == 'tb' then
    local deficit = 0
    if f > tk then
      deficit = f - tk
      if deficit > bp then deficit = bp end
    end
    local avail = bp - deficit
    local need = cost * p
    if need <= avail then
      ok, rem, retry, reset = 1, floor((avail - need) / p), 0, ceil((deficit + need) / k)
      if cost ~= 0 then new = top + need end
    else
      ok, rem, retry, reset = 0, floor(avail / p), ceil((need - avail) / k), ceil(deficit / k)
    end
  else
    local arrival = tk
    if f - bp > arrival then arrival = f - bp end
    local start = f
    if arrival > start then start = arrival end
    local new_tat = start + cost * p
    local after = new_tat - arrival
    if after <= bp then
      ok, rem, retry, reset = 1, floor((bp - after) / p), 0, ceil(after / k)
      if cost ~= 0 then new = new_tat end
    else
      local backlog = start - arrival
      ok, rem, retry, reset = 0, floor((bp - backlog) / p), ceil((after - bp) / k),
        ceil(backlog / k)
    end
  end
  -- An absent bucket is created even when nothing is taken (main.lua, run).
  if new == nil and not v then new = f end
  if new ~= nil then
    -- Expires at the first millisecond from which the bucket is full, never before this
    -- reading's (SCRIPTS.md, "Expiry").
    local at = ceil(new / (k * tpm))
    local now_ms = ceil(t / tpm)
    if at < now_ms then at = now_ms end
    at = base + at
    if at >= TWO53 then return run(keys, general(algo, argv)) end
    redis.call('SET', key, sformat('%.0f', new), 'PXAT', sformat('%.0f', at))
  end
  return { 0, t, ok, b, rem, retry, reset }
end
