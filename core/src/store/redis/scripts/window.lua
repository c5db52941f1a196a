-- sluicegate: the fixed window ('fw') and the sliding window counter ('sw')
-- (core/src/window.rs). Windows are [j*W, (j+1)*W) on the clock's own zero (the epoch of
-- SCRIPTS.md, "Clock"), the same grid for every key.

-- (index, t_e) for a reading: the reading's window, or the state's window when the reading
-- is earlier than it (clamped to that window's start).
local function win_at(W, j, t)
  local index = fdiv(t, W)
  if le(j, index) then return index, t end
  return j, mul(j, W)
end

local function win_params(rest, name)
  local f = need_fields(rest, 2, name)
  local P = { n = f[1], w = f[2] }
  positive(P.n, 'N'); positive(P.w, 'W')
  -- The fast paths need N * W * 3 below 2^53 (the sliding window's weighted sums, and the
  -- fixed window's counts) and readings within 2^52 - 2W.
  local nw = mul(mul(P.n, P.w), 3)
  P.fast = type(nw) == 'number' and nw < TWO53
  return P
end

-- (index, t_e) in doubles for a reading and a state index whose windows end below 2^52.
local function win_fast(W, j, t)
  if type(t) ~= 'number' or type(j) ~= 'number' or t + 2 * W >= TWO53 / 2
      or (j + 2) * W >= TWO53 / 2 then
    return nil
  end
  local index = nfloor(t, W)
  if j <= index then return index, t end
  return j, j * W
end

--------------------------------------------------------------------------------------------
-- Fixed window. Spec: 'fw N W'. State: 'j used' (the core packs j << bits(N) | used).
--------------------------------------------------------------------------------------------
local FW = {}

function FW.parse(rest) return win_params(rest, 'fw') end
function FW.cap(P) return P.n end
function FW.creates(P) return false end
function FW.fresh(P, t) return { fdiv(t, P.w), 0 } end
function FW.load(key) local v = get_word(key); if v then return words(v, 2) end end
function FW.enc(s) return S(s[1]) .. ' ' .. S(s[2]) end
function FW.store(key, P, s, at) set_word(key, FW.enc(s), at) end

function FW.full_at(P, s)
  if s[2] ~= 0 then return mul(add(s[1], 1), P.w), 1 end
  return mul(s[1], P.w), 1
end

-- (index, used, t_e) as of t.
local function fw_at(P, s, t)
  local index, te = win_at(P.w, s[1], t)
  if cmp(index, s[1]) == 0 then return index, s[2], te end
  return index, 0, te
end

function FW.decide(P, s, t, cost)
  if FAST and P.fast and type(s[2]) == 'number' then
    local index, te = win_fast(P.w, s[1], t)
    if index then
      local n, used = P.n, 0
      if index == s[1] then used = s[2] end
      local to_next = (index + 1) * P.w - te
      local used2 = used + cost
      if used2 <= n then
        local reset, new = to_next, nil
        if used2 == 0 then reset = 0 end
        if cost ~= 0 then new = { index, used2 } end
        return { true, n, n - used2, 0, reset }, new
      end
      return { false, n, n - used, to_next, to_next }, nil
    end
  end
  local index, used, te = fw_at(P, s, t)
  local to_next = sub(mul(add(index, 1), P.w), te)
  local used2 = add(used, cost)
  if le(used2, P.n) then
    local reset, new = to_next, nil
    if used2 == 0 then reset = 0 end
    if cost ~= 0 then new = { index, used2 } end
    return { true, P.n, sub(P.n, used2), 0, reset }, new
  end
  -- used > 0 here (cost <= N), so the window holds something until its end.
  return { false, P.n, sub(P.n, used), to_next, to_next }, nil
end

function FW.refund(P, s, t, cost)
  local index, used = fw_at(P, s, t)
  local left = ssub(used, cost)
  if cmp(left, used) ~= 0 then return { index, left } end
  return nil
end

--------------------------------------------------------------------------------------------
-- Sliding window counter. Spec: 'sw N W'. Admits iff prev*(W-e)/W + curr + c <= N, evaluated
-- as prev*(W-e) + (curr+c)*W <= N*W. State: 'j prev curr' (the core packs
-- j << 2 bits(N) | prev << bits(N) | curr).
--------------------------------------------------------------------------------------------
local SW = {}

function SW.parse(rest) return win_params(rest, 'sw') end
function SW.cap(P) return P.n end
function SW.creates(P) return false end
function SW.fresh(P, t) return { fdiv(t, P.w), 0, 0 } end
function SW.load(key) local v = get_word(key); if v then return words(v, 3) end end
function SW.enc(s) return S(s[1]) .. ' ' .. S(s[2]) .. ' ' .. S(s[3]) end
function SW.store(key, P, s, at) set_word(key, SW.enc(s), at) end

function SW.full_at(P, s)
  if s[3] ~= 0 then return mul(add(s[1], 2), P.w), 1 end
  if s[2] ~= 0 then return mul(add(s[1], 1), P.w), 1 end
  return mul(s[1], P.w), 1
end

-- The effective counts as of t: { index, prev, curr, e = t_e - index*W, te }.
local function sw_view(P, s, t)
  local index, te = win_at(P.w, s[1], t)
  local prev, curr = 0, 0
  if cmp(index, s[1]) == 0 then
    prev, curr = s[2], s[3]
  elseif cmp(index, add(s[1], 1)) == 0 then
    prev = s[3]
  end
  return { index = index, prev = prev, curr = curr, e = sub(te, mul(index, P.w)), te = te }
end

-- reset_after for counts (prev, curr) in the view's window.
local function sw_reset(P, v, prev, curr)
  local ends
  if curr ~= 0 then ends = 2 elseif prev ~= 0 then ends = 1 else return 0 end
  return sub(mul(add(v.index, ends), P.w), v.te)
end

-- floor(N - curr - prev*(W - e)/W), never below zero.
local function sw_remaining(P, v, curr)
  local weighted = cdiv(mul(v.prev, sub(P.w, v.e)), P.w)
  return ssub(ssub(P.n, curr), weighted)
end

-- The least wait from t_e until cost would be admitted (it is rejected now).
local function sw_retry(P, v, cost)
  local n, w = P.n, P.w
  if le(add(v.curr, cost), n) then
    -- In this window: the least e' with prev*(W - e') <= (N - curr - c)*W; prev > 0 here.
    local room = mul(sub(sub(n, v.curr), cost), w)
    local e2 = sub(w, imin(fdiv(room, v.prev), w))
    return sub(add(mul(v.index, w), e2), v.te)
  end
  -- Next window: prev becomes curr (> 0, since cost <= N) and curr becomes 0.
  local room = mul(sub(n, cost), w)
  local e2 = sub(w, imin(fdiv(room, v.curr), w))
  return sub(add(mul(add(v.index, 1), w), e2), v.te)
end

function SW.decide(P, s, t, cost)
  if FAST and P.fast and type(s[2]) == 'number' and type(s[3]) == 'number' then
    local index, te = win_fast(P.w, s[1], t)
    if index then
      local n, w = P.n, P.w
      local prev, curr = 0, 0
      if index == s[1] then
        prev, curr = s[2], s[3]
      elseif index == s[1] + 1 then
        prev = s[3]
      end
      local e = te - index * w
      local function remaining(c)
        local r = n - c - nceil(prev * (w - e), w)
        if r < 0 then return 0 end
        return r
      end
      local function reset(pv, c)
        if c ~= 0 then return (index + 2) * w - te end
        if pv ~= 0 then return (index + 1) * w - te end
        return 0
      end
      local c2 = curr + cost
      if prev * (w - e) + c2 * w <= n * w then
        local new = nil
        if cost ~= 0 then new = { index, prev, c2 } end
        return { true, n, remaining(c2), 0, reset(prev, c2) }, new
      end
      local retry
      if c2 <= n then
        local room = nfloor((n - c2) * w, prev)
        if room > w then room = w end
        retry = index * w + (w - room) - te
      else
        local room = nfloor((n - cost) * w, curr)
        if room > w then room = w end
        retry = (index + 1) * w + (w - room) - te
      end
      return { false, n, remaining(curr), retry, reset(prev, curr) }, nil
    end
  end
  local v = sw_view(P, s, t)
  local weighted = mul(v.prev, sub(P.w, v.e))
  local curr = add(v.curr, cost)
  if le(add(weighted, mul(curr, P.w)), mul(P.n, P.w)) then
    local new = nil
    if cost ~= 0 then new = { v.index, v.prev, curr } end
    return { true, P.n, sw_remaining(P, v, curr), 0, sw_reset(P, v, v.prev, curr) }, new
  end
  return { false, P.n, sw_remaining(P, v, v.curr), sw_retry(P, v, cost),
           sw_reset(P, v, v.prev, v.curr) }, nil
end

function SW.refund(P, s, t, cost)
  local v = sw_view(P, s, t)
  local curr = ssub(v.curr, cost)
  if cmp(curr, v.curr) ~= 0 then return { v.index, v.prev, curr } end
  return nil
end
