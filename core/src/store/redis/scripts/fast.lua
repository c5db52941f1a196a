-- sluicegate: the common request by a function of its own (SCRIPTS.md, "The one-bucket
-- functions"): one bucket of a continuous token bucket ('tb') or GCRA ('gcra'), op acquire,
-- no bound.
--
--   FCALL NAME_tb 1 key cost k p b i [test_clock]
--   FCALL NAME_gcra 1 key cost k p b i [test_clock]
--
-- is `FCALL NAME 1 key acquire cost '' test_clock 'tb k p b i'` (resp. 'gcra ...'): the same
-- decision, the same write, with a shorter reply (SCRIPTS.md, "Replies"): {remaining,
-- reset_after} admitted, {remaining, retry_after, reset_after} rejected, {capacity} when the
-- cost exceeds it. The spec's numbers come as arguments of their own, so nothing is parsed
-- but them; the arithmetic is the fast path of TB.decide and GC.decide (tb_fast, gc_fast).
-- What that path cannot take (a value that might reach 2^53, an argument or a stored value
-- that is not an integer Lua reads exactly, the test clock's ' exact') goes to run, which
-- decides it exactly or fails as the general call does; its reply is shortened the same way.

-- The argument list of the general call that this one stands for.
local function general(algo, argv)
  return { 'acquire', argv[1] or '', '', argv[6] or '',
           algo .. ' ' .. (argv[2] or '') .. ' ' .. (argv[3] or '') .. ' ' .. (argv[4] or '')
             .. ' ' .. (argv[5] or '') }
end

-- The short reply of run's reply r to that call: {0, now, allowed, limit, remaining,
-- retry_after, reset_after}, or {1, now, 1, capacity} (the cost exceeds the capacity).
local function short(r)
  if r[1] == 1 then return { r[4] } end
  if r[3] == 1 then return { r[5], r[7] } end
  return { r[5], r[6], r[7] }
end

-- How an integral double below 2^53 is printed: '%d' where Lua's integer format is 64 bits
-- wide (LUA_INTFRM_T is long: 64-bit Unix builds), which prints it exactly and several times
-- faster than '%.0f' (glibc prints that through its multi-precision path); else '%.0f'.
local INT_FORMAT = '%.0f'
if sformat('%d', 9007199254740991) == '9007199254740991' then INT_FORMAT = '%d' end

-- The quota arguments (k p b i, as strings) last found valid, and their numbers: a limiter
-- sends the same four strings on every call, and Lua compares strings by identity (they are
-- interned), so a call with those strings skips their checks. `false` matches no argument.
local ok_k, ok_p, ok_b, ok_i = false, false, false, false
local ok_nk, ok_np, ok_nb, ok_ni

local function one(algo, keys, argv)
  local cost = tonumber(argv[1])
  local sk, sp, sb, si = argv[2], argv[3], argv[4], argv[5]
  local k, p, b, i
  if sk == ok_k and sp == ok_p and sb == ok_b and si == ok_i then
    k, p, b, i = ok_nk, ok_np, ok_nb, ok_ni
  else
    k, p, b, i = tonumber(sk), tonumber(sp), tonumber(sb), tonumber(si)
    -- Integers (x % 1 == 0 fails for NaN and infinities too) with b * p < 2^51, so that
    -- every value below stays under 2^53 once the reading passes the guard further down.
    if not (k and p and b and i and k >= 1 and p >= 1 and b >= 1 and i >= 0 and i <= b
        and k % 1 == 0 and p % 1 == 0 and b % 1 == 0 and i % 1 == 0
        and b * p < TWO53 / 4) then
      return short(run(keys, general(algo, argv)))
    end
    ok_k, ok_p, ok_b, ok_i, ok_nk, ok_np, ok_nb, ok_ni = sk, sp, sb, si, k, p, b, i
  end
  if not (cost and #keys == 1 and #argv <= 6 and cost >= 0 and cost % 1 == 0) then
    return short(run(keys, general(algo, argv)))
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
      return short(run(keys, general(algo, argv)))
    end
  end
  if cost > b then return { b } end   -- insufficient capacity
  local key = keys[1]
  local bp = b * p
  local v = redis.call('GET', key)
  local f
  if v then
    -- Decimal digits only, as the general path's N() reads them: tonumber would also take
    -- '1e15', '0x1F', ' 42 ' or '42.0' from a corrupt key, which that path refuses.
    f = v:find('^%d+$') and tonumber(v)
    if not (f and f >= 0 and f < TWO53 and f % 1 == 0) then
      return short(run(keys, general(algo, argv)))
    end
  else
    f = t * k + (b - i) * p
  end
  -- tb_fast's and gc_fast's precondition, and an expiry computed exactly below.
  local tk = t * k
  local top = f
  if tk > top then top = tk end
  if not (tk < TWO53 and top + 2 * bp < TWO53 and k * tpm < TWO53) then
    return short(run(keys, general(algo, argv)))
  end
  local ok, rem, retry, reset, new
  if algo == 'tb' then
    ok, rem, retry, reset, new = tb_fast(f, tk, bp, p, k, cost)
  else
    ok, rem, retry, reset, new = gc_fast(f, tk, bp, p, k, cost)
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
    if at >= TWO53 then return short(run(keys, general(algo, argv))) end
    redis.call('SET', key, sformat(INT_FORMAT, new), 'PXAT', sformat(INT_FORMAT, at))
  end
  if ok == 1 then return { rem, reset } end   -- admitted: retry_after is 0
  return { rem, retry, reset }
end
