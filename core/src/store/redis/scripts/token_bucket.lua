-- sluicegate: the token bucket, continuous refill ('tb') and interval refill ('ti').
--
-- Each algorithm is a table of functions over an immutable state value (see SCRIPTS.md,
-- "Algorithm interface"); none of them touches Redis except load and store. A decision is
-- { allowed, limit, remaining, retry_after, reset_after } in ticks. The steps mirror the Rust
-- core (core/src/algorithm.rs) line for line, with its unsigned u128 arithmetic replaced by
-- the exact integers of int.lua.

-- Helpers shared by the algorithms whose state is one Redis string.
local function get_word(key)
  local v = redis.call('GET', key)
  if v then return v end
  return nil
end

local function set_word(key, text, at)
  redis.call('SET', key, text, 'PXAT', S(at))
end

-- Splits a state string of space-separated decimal integers.
local function words(s, n)
  local out = {}
  for w in s:gmatch('%S+') do
    out[#out + 1] = N(w)
  end
  if #out ~= n then fail('corrupt state: ' .. s) end
  return out
end

-- The n decimal fields of a spec's parameters (the text after the algorithm's name).
local SPEC_PATTERNS = {}
local function need_fields(rest, n, name)
  local pat = SPEC_PATTERNS[n]
  if not pat then
    pat = '^' .. string.rep('(%d+) ', n - 1) .. '(%d+)$'
    SPEC_PATTERNS[n] = pat
  end
  local f = { rest:match(pat) }
  if #f ~= n then fail(name .. ' takes ' .. n .. ' decimal parameters: ' .. rest) end
  for i = 1, n do
    local s = f[i]
    if #s <= 15 then f[i] = tonumber(s) else f[i] = N(s) end   -- digits only, by the pattern
  end
  return f
end

local function positive(x, what)
  if x == 0 then fail(what .. ' must be at least 1') end
end

--------------------------------------------------------------------------------------------
-- Continuous refill. Spec: 'tb k p b i' (rate k tokens per p ticks in lowest terms, capacity
-- b, initial tokens i). State: F * k, the instant the bucket is full, scaled by k (one token
-- is p scaled units), the Rust core's word exactly.
--------------------------------------------------------------------------------------------
local TB = {}

function TB.parse(rest)
  local f = need_fields(rest, 4, 'tb')
  local P = { k = f[1], p = f[2], b = f[3], i = f[4] }
  positive(P.k, 'k'); positive(P.p, 'p'); positive(P.b, 'b')
  if lt(P.b, P.i) then fail('initial exceeds burst') end
  P.bp = mul(P.b, P.p)
  P.init = mul(sub(P.b, P.i), P.p)
  -- The fast path needs k, p and 2 * bp below 2^53 (then cost * p <= bp is too).
  P.fast = type(P.k) == 'number' and type(P.bp) == 'number' and P.bp < TWO53 / 2
  return P
end

function TB.cap(P) return P.b end
function TB.creates(P) return lt(P.i, P.b) end
function TB.fresh(P, t) return add(mul(t, P.k), P.init) end
function TB.load(key) local v = get_word(key); if v then return N(v) end end
function TB.enc(f) return S(f) end
function TB.store(key, P, f, at) set_word(key, S(f), at) end
function TB.full_at(P, f) return f, P.k end

-- The decision in doubles for a state f and a scaled reading tk = t * k with max(f, tk) +
-- 2 * bp < 2^53 (the caller checks), so that every value below is an integer under 2^53 and
-- floor(x / y), ceil(x / y) are exact (SCRIPTS.md, "The one-bucket functions"). Returns
-- allowed (1 or 0), remaining, retry_after, reset_after, and the new state (nil: unchanged).
-- fast.lua runs it too.
local function tb_fast(f, tk, bp, p, k, cost)
  local top = f
  if tk > top then top = tk end
  local deficit = 0
  if f > tk then
    deficit = f - tk
    if deficit > bp then deficit = bp end
  end
  local avail = bp - deficit
  local need = cost * p
  if need <= avail then
    local new = nil
    if cost ~= 0 then new = top + need end
    return 1, floor((avail - need) / p), 0, ceil((deficit + need) / k), new
  end
  return 0, floor(avail / p), ceil((need - avail) / k), ceil(deficit / k), nil
end

function TB.decide(P, f, t, cost)
  if FAST and P.fast and type(f) == 'number' and type(t) == 'number' then
    local tk = t * P.k
    local top = f
    if tk > top then top = tk end
    if tk < TWO53 and top + 2 * P.bp < TWO53 then
      local ok, rem, retry, reset, new = tb_fast(f, tk, P.bp, P.p, P.k, cost)
      return { ok == 1, P.b, rem, retry, reset }, new
    end
  end
  local tk = mul(t, P.k)
  -- deficit = F - t_e with the clamp t_e = max(t, F - b/r): never more than a bucket.
  local deficit = 0
  if lt(tk, f) then deficit = imin(sub(f, tk), P.bp) end
  local avail = sub(P.bp, deficit)
  local need = mul(cost, P.p)
  if le(need, avail) then
    local new = nil
    if cost ~= 0 then new = add(imax(f, tk), need) end
    return { true, P.b, fdiv(sub(avail, need), P.p), 0, cdiv(add(deficit, need), P.k) }, new
  end
  return { false, P.b, fdiv(avail, P.p), cdiv(sub(need, avail), P.k), cdiv(deficit, P.k) }, nil
end

function TB.refund(P, f, t, cost)
  local tk = mul(t, P.k)
  if le(f, tk) or cost == 0 then return nil end   -- already full: nothing to give back
  return imax(ssub(f, mul(imin(cost, P.b), P.p)), tk)
end

--------------------------------------------------------------------------------------------
-- Interval refill. Spec: 'ti k P b i o' (k whole tokens every P ticks, capacity b, initial
-- tokens i, grid origin o). State: 'n tau', tau tokens as of period n of the grid o + j*P
-- (the Rust core packs the same pair as n << bits(b) | tau).
--------------------------------------------------------------------------------------------
local TI = {}

function TI.parse(rest)
  local f = need_fields(rest, 5, 'ti')
  local P = { k = f[1], p = f[2], b = f[3], i = f[4], o = f[5] }
  positive(P.k, 'k'); positive(P.p, 'P'); positive(P.b, 'b')
  if lt(P.b, P.i) then fail('initial exceeds burst') end
  -- The fast path needs every wait, (floor(b/k) + 2) periods, below 2^52 (then the
  -- boundaries it adds to a reading below 2^52 stay below 2^53).
  local span = mul(add(fdiv(P.b, P.k), 2), P.p)
  P.fast = type(span) == 'number' and span < TWO53 / 2 and type(P.o) == 'number'
    and type(P.k) == 'number' and type(P.b) == 'number' and P.b < TWO53 / 2
  return P
end

local function ti_index(P, t)
  if le(t, P.o) then return 0 end
  return fdiv(sub(t, P.o), P.p)
end

local function ti_boundary(P, n) return add(P.o, mul(n, P.p)) end

-- (p_e, tokens at p_e, t_e) for a reading t of state s.
local function ti_at(P, s, t)
  local n, tau = s[1], s[2]
  local start = ti_boundary(P, n)
  if lt(t, add(start, P.p)) then
    return n, tau, imax(t, start)     -- same period as the state, or an earlier reading
  end
  local pe = ti_index(P, t)
  return pe, imin(add(tau, mul(P.k, sub(pe, n))), P.b), t
end

-- Ticks from te until need more tokens have been added after period pe.
local function ti_wait(P, pe, need, te)
  if need == 0 then return 0 end
  return sub(add(ti_boundary(P, pe), mul(cdiv(need, P.k), P.p)), te)
end

function TI.cap(P) return P.b end
function TI.creates(P) return lt(P.i, P.b) end
function TI.fresh(P, t) return { ti_index(P, t), P.i } end
function TI.load(key) local v = get_word(key); if v then return words(v, 2) end end
function TI.enc(s) return S(s[1]) .. ' ' .. S(s[2]) end
function TI.store(key, P, s, at) set_word(key, TI.enc(s), at) end

function TI.full_at(P, s)
  local n, tau = s[1], s[2]
  if le(P.b, tau) then return ti_boundary(P, n), 1 end
  return ti_boundary(P, add(n, cdiv(sub(P.b, tau), P.k))), 1
end

-- ti_at and ti_wait in doubles, for readings and states within 2^52 ticks.
local function ti_fast(P, s, t, cost)
  local n, tau = s[1], s[2]
  local k, p, b, o = P.k, P.p, P.b, P.o
  local start = o + n * p
  if start >= TWO53 / 2 then return nil end
  local pe, tokens, te = n, tau, t
  if t < start + p then
    if t < start then te = start end
  else
    pe = 0
    if t > o then pe = nfloor(t - o, p) end
    local added = k * (pe - n)       -- a double: rounded up to b or more when it is large
    if added >= b then tokens = b else tokens = tau + added end
    if tokens > b then tokens = b end
  end
  local base = o + pe * p
  local function wait(need)
    if need == 0 then return 0 end
    return base + nceil(need, k) * p - te
  end
  if cost <= tokens then
    local rem = tokens - cost
    local new = nil
    if cost ~= 0 then new = { pe, rem } end
    return { true, b, rem, 0, wait(b - rem) }, new
  end
  return { false, b, tokens, wait(cost - tokens), wait(b - tokens) }, nil
end

function TI.decide(P, s, t, cost)
  if FAST and P.fast and type(t) == 'number' and t < TWO53 / 2 and type(s[1]) == 'number'
      and type(s[2]) == 'number' then
    local d, new = ti_fast(P, s, t, cost)
    if d then return d, new end
  end
  local pe, tokens, te = ti_at(P, s, t)
  if le(cost, tokens) then
    local rem = sub(tokens, cost)
    local new = nil
    if cost ~= 0 then new = { pe, rem } end
    return { true, P.b, rem, 0, ti_wait(P, pe, sub(P.b, rem), te) }, new
  end
  return { false, P.b, tokens, ti_wait(P, pe, sub(cost, tokens), te),
           ti_wait(P, pe, sub(P.b, tokens), te) }, nil
end

function TI.refund(P, s, t, cost)
  local pe, tokens = ti_at(P, s, t)
  local nt = imin(add(tokens, cost), P.b)
  if cmp(nt, tokens) ~= 0 then return { pe, nt } end
  return nil
end
