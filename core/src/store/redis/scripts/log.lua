-- sluicegate: the sliding log ('sl'; core/src/log.rs).
--
-- Spec: 'sl N W'. State: one Redis list per bucket. Element 0 is the header 'last total'
-- (the newest admission's t_e or the creation instant, and the units in the runs); elements
-- 1.. are the runs 'ts units', oldest first, timestamps strictly increasing: the Rust core's
-- VecDeque of runs, element for element. Runs are read lazily (LRANGE in batches), so a
-- decision reads O(1) elements plus the runs that have left the window (which an admission
-- then drops) or, for a rejection, the runs up to the one whose expiry decides it.
--
-- decide/refund return a plan (what to change) instead of a new state; store applies it.

local LOG = {}
local LOG_BATCH = 64

function LOG.parse(rest)
  local f = need_fields(rest, 2, 'sl')
  local P = { n = f[1], w = f[2] }
  positive(P.n, 'N'); positive(P.w, 'W')
  return P
end

function LOG.cap(P) return P.n end
function LOG.creates(P) return false end
function LOG.fresh(P, t) return { fresh = true, last = t, total = 0, len = 0, runs = {} } end

function LOG.load(key)
  local h = redis.call('LINDEX', key, 0)
  if not h then return nil end
  local f = words(h, 2)
  return { key = key, last = f[1], total = f[2], runs = {} }
end

local function log_len(st)
  if st.len == nil then st.len = redis.call('LLEN', st.key) - 1 end
  return st.len
end

-- Run i (1 = oldest) as { ts, units }. Runs are fetched in batches that double from 2 (most
-- decisions read one run from each end) and parsed when first read.
local function log_run(st, i)
  local r = st.runs[i]
  if type(r) == 'table' then return r end
  if r == nil then
    local size = st.batch or 2
    st.batch = size * 2
    if size > LOG_BATCH then size = LOG_BATCH end
    local got = redis.call('LRANGE', st.key, i, i + size - 1)
    for j, text in ipairs(got) do
      if st.runs[i + j - 1] == nil then st.runs[i + j - 1] = text end
    end
    if #got < size then st.len = i + #got - 1 end
    r = st.runs[i]
    if r == nil then fail('corrupt sliding log') end
  end
  r = words(r, 2)
  st.runs[i] = r
  return r
end

-- (runs, units) at the front that have left the window (t_e - W, t_e].
local function log_gone(P, st, te)
  if st.total == 0 then return 0, 0 end
  local len = log_len(st)
  if le(add(log_run(st, len)[1], P.w), te) then return len, st.total end
  local g, units = 0, 0
  for i = 1, len do
    local r = log_run(st, i)
    if lt(te, add(r[1], P.w)) then break end
    g = i
    units = add(units, r[2])
  end
  return g, units
end

local function log_newest_expiry(P, st, te)
  if st.total == 0 or log_len(st) == 0 then return 0 end
  return ssub(add(log_run(st, log_len(st))[1], P.w), te)
end

function LOG.decide(P, st, t, cost)
  local te = imax(t, st.last)
  local g, gone = log_gone(P, st, te)
  local live = sub(st.total, gone)
  local after = add(live, cost)
  if le(after, P.n) then
    local reset
    if after == 0 then
      reset = 0
    elseif cost ~= 0 then
      reset = P.w                       -- the newest admission is this one, at t_e
    else
      reset = log_newest_expiry(P, st, te)
    end
    local plan = nil
    if cost ~= 0 then
      plan = { kind = 'admit', st = st, drop = g, te = te, cost = cost, total = after }
    end
    return { true, P.n, sub(P.n, after), 0, reset }, plan
  end
  -- The (live + c - N)-th oldest live unit must leave the window first.
  local need = sub(after, P.n)
  local expiry = te
  for i = g + 1, log_len(st) do
    local r = log_run(st, i)
    if le(need, r[2]) then
      expiry = r[1]
      break
    end
    need = sub(need, r[2])
  end
  return { false, P.n, sub(P.n, live), sub(add(expiry, P.w), te),
           log_newest_expiry(P, st, te) }, nil
end

-- Removes up to cost units still in the window, newest first; last does not change.
function LOG.refund(P, st, t, cost)
  if st.fresh then return nil end
  local te = imax(t, st.last)
  local _, gone = log_gone(P, st, te)
  local left = imin(cost, sub(st.total, gone))
  if left == 0 then return nil end
  local len = log_len(st)
  local pops, tail = 0, nil
  local i = len
  while left ~= 0 do
    local r = log_run(st, i)
    if lt(left, r[2]) then
      tail = { r[1], sub(r[2], left) }
      break
    end
    left = sub(left, r[2])
    pops = pops + 1
    i = i - 1
  end
  return { kind = 'refund', st = st, pops = pops, tail = tail,
           total = sub(st.total, imin(cost, sub(st.total, gone))) }
end

-- A composite's acquire-then-refund of cost at t (SEMANTICS.md, "Composite limits"): the
-- admission drops the runs that left the window and moves last to t_e, the refund takes the
-- cost back off the tail, so what remains is the drop and the new header.
function LOG.undo(P, st, plan, t, cost)
  if plan.drop == 0 and cmp(plan.te, st.last) == 0 then return nil end
  return { kind = 'settle', st = st, drop = plan.drop, te = plan.te,
           total = sub(plan.total, plan.cost) }
end

-- The state a plan reads as (for the peek after a composite's refund: the settled log
-- decides as the original does at the same reading).
function LOG.view(st, plan) return st end

-- The newest run's timestamp after the plan, or nil when no run is left.
local function log_newest_after(st, plan)
  if plan.kind == 'admit' then return plan.te end
  local len = 0
  if st.total ~= 0 then len = log_len(st) end
  local keep = len
  if plan.kind == 'refund' then
    keep = len - plan.pops
  else
    if len - plan.drop <= 0 then keep = 0 end
  end
  if keep <= 0 then return nil end
  return log_run(st, keep)[1]
end

-- full_at = max(last, newest + W): is_full(now) holds exactly from there on.
function LOG.full_at(P, plan)
  local last = plan.st.last
  if plan.kind ~= 'refund' then last = plan.te end
  local newest = log_newest_after(plan.st, plan)
  if newest == nil then return last, 1 end
  return imax(last, add(newest, P.w)), 1
end

local function log_header(last, total) return S(last) .. ' ' .. S(total) end

-- Replaces the header and drops the first `drop` runs.
local function log_front(key, drop, header)
  if drop > 0 then
    redis.call('LTRIM', key, drop + 1, -1)
    redis.call('LPUSH', key, header)
  else
    redis.call('LSET', key, 0, header)
  end
end

function LOG.store(key, P, plan, at)
  local st = plan.st
  if plan.kind == 'admit' then
    local header = log_header(plan.te, plan.total)
    if st.fresh then
      redis.call('RPUSH', key, header, S(plan.te) .. ' ' .. S(plan.cost))
    else
      local len = 0
      local tail = nil
      if st.total ~= 0 then
        len = log_len(st)
        tail = log_run(st, len)
      end
      log_front(key, plan.drop, header)
      if len - plan.drop > 0 and cmp(tail[1], plan.te) == 0 then
        redis.call('LSET', key, -1, S(plan.te) .. ' ' .. S(add(tail[2], plan.cost)))
      else
        redis.call('RPUSH', key, S(plan.te) .. ' ' .. S(plan.cost))
      end
    end
  elseif plan.kind == 'refund' then
    redis.call('LSET', key, 0, log_header(st.last, plan.total))
    if plan.pops > 0 then redis.call('LTRIM', key, 0, -(plan.pops + 1)) end
    if plan.tail then
      redis.call('LSET', key, -1, S(plan.tail[1]) .. ' ' .. S(plan.tail[2]))
    end
  else
    log_front(key, plan.drop, log_header(plan.te, plan.total))
  end
  redis.call('PEXPIREAT', key, S(at))
end
