-- sluicegate: the sliding log ('sl'; core/src/log.rs).
--
-- Spec: 'sl N W'. State: one Redis list per bucket. Element 0 is the header 'last base': the
-- newest admission's t_e (or the creation instant) and the running count of units before the
-- first run in the list. Elements 1.. are the runs 'ts cum', oldest first, timestamps and
-- counts strictly increasing: run i holds cum_i - cum_(i-1) units admitted at ts (cum_0 =
-- base). That is the Rust core's Log (last, runs of (timestamp, units), total = cum_len - base)
-- with the units kept as a running count, so that every question a decision asks (which runs
-- have left the window, which unit must leave before a request fits, how many units a refund
-- removes) is a binary search: a decision reads O(log runs) list elements, never the whole log.
--
-- decide/refund return a plan (what to change) instead of a new state; store applies it.

local LOG = {}

function LOG.parse(rest)
  local f = need_fields(rest, 2, 'sl')
  local P = { n = f[1], w = f[2] }
  positive(P.n, 'N'); positive(P.w, 'W')
  return P
end

function LOG.cap(P) return P.n end
function LOG.creates(P) return false end
function LOG.fresh(P, t) return { fresh = true, last = t, base = 0, len = 0, runs = {} } end

function LOG.load(key)
  local h = redis.call('LINDEX', key, 0)
  if not h then return nil end
  local f = words(h, 2)
  return { key = key, last = f[1], base = f[2], len = redis.call('LLEN', key) - 1, runs = {} }
end

-- Run i (1 = oldest) as { ts, cum }; run 0 is { nil, base }.
local function log_run(st, i)
  if i == 0 then return { nil, st.base } end
  local r = st.runs[i]
  if r then return r end
  local text = redis.call('LINDEX', st.key, i)
  if not text then fail('corrupt sliding log') end
  r = words(text, 2)
  st.runs[i] = r
  return r
end

local function log_end(st) return log_run(st, st.len)[2] end   -- cum of the newest run

-- The least i in [lo, hi] with pred(run i), given pred(run hi) and a monotone pred.
local function log_search(st, lo, hi, pred)
  while lo < hi do
    local mid = floor((lo + hi) / 2)
    if pred(log_run(st, mid)) then hi = mid else lo = mid + 1 end
  end
  return hi
end

-- g: the runs at the front that have left the window (t_e - W, t_e] (ts + W <= t_e).
local function log_gone(P, st, te)
  local len = st.len
  if len == 0 then return 0 end
  local function live(r) return lt(te, add(r[1], P.w)) end
  if live(log_run(st, 1)) then return 0 end
  if not live(log_run(st, len)) then return len end
  return log_search(st, 2, len, live) - 1
end

local function log_newest_expiry(P, st, te)
  if st.len == 0 then return 0 end
  return ssub(add(log_run(st, st.len)[1], P.w), te)
end

function LOG.decide(P, st, t, cost)
  local te = imax(t, st.last)
  local g = log_gone(P, st, te)
  local cum_g = log_run(st, g)[2]
  local cum_end = st.base
  if st.len > 0 then cum_end = log_end(st) end
  local live = sub(cum_end, cum_g)
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
      plan = { kind = 'admit', st = st, drop = g, te = te, cost = cost,
               base = cum_g, cum = add(cum_end, cost) }
    end
    return { true, P.n, sub(P.n, after), 0, reset }, plan
  end
  -- The (live + c - N)-th oldest live unit must leave the window first: the first run whose
  -- running count reaches cum_g + need.
  local target = add(cum_g, sub(after, P.n))
  local i = log_search(st, g + 1, st.len, function(r) return le(target, r[2]) end)
  return { false, P.n, sub(P.n, live), sub(add(log_run(st, i)[1], P.w), te),
           log_newest_expiry(P, st, te) }, nil
end

-- Removes up to cost units still in the window, newest first; last does not change.
function LOG.refund(P, st, t, cost)
  if st.fresh or st.len == 0 then return nil end
  local te = imax(t, st.last)
  local cum_g = log_run(st, log_gone(P, st, te))[2]
  local cum_end = log_end(st)
  local left = imin(cost, sub(cum_end, cum_g))
  if left == 0 then return nil end
  local new_end = sub(cum_end, left)
  -- Keep runs 1..m, m the first run whose count reaches new_end (0: none), run m cut there.
  local m = log_search(st, 0, st.len, function(r) return le(new_end, r[2]) end)
  return { kind = 'refund', st = st, keep = m, cum = new_end }
end

-- A composite's acquire-then-refund of cost at t (SEMANTICS.md, "Composite limits"): the
-- admission drops the runs that left the window and moves last to t_e, the refund takes the
-- cost back off the tail, so what remains is the drop and the new header.
function LOG.undo(P, st, plan, t, cost)
  if plan.drop == 0 and cmp(plan.te, st.last) == 0 then return nil end
  return { kind = 'settle', st = st, drop = plan.drop, te = plan.te, base = plan.base }
end

-- The state a plan reads as (for the peek after a composite's refund: the settled log
-- decides as the original does at the same reading).
function LOG.view(st, plan) return st end

-- full_at = max(last, newest + W): is_full(now) holds exactly from there on.
function LOG.full_at(P, plan)
  local st = plan.st
  local last, newest = st.last, nil
  if plan.kind == 'admit' then
    last, newest = plan.te, plan.te
  elseif plan.kind == 'refund' then
    if plan.keep > 0 then newest = log_run(st, plan.keep)[1] end
  else
    last = plan.te
    if st.len > plan.drop then newest = log_run(st, st.len)[1] end
  end
  if newest == nil then return last, 1 end
  return imax(last, add(newest, P.w)), 1
end

local function pair(a, b) return S(a) .. ' ' .. S(b) end

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
    if st.fresh then
      redis.call('RPUSH', key, pair(plan.te, plan.base), pair(plan.te, plan.cum))
    else
      local merge = st.len > plan.drop and cmp(log_run(st, st.len)[1], plan.te) == 0
      log_front(key, plan.drop, pair(plan.te, plan.base))
      if merge then
        redis.call('LSET', key, -1, pair(plan.te, plan.cum))
      else
        redis.call('RPUSH', key, pair(plan.te, plan.cum))
      end
    end
  elseif plan.kind == 'refund' then
    if plan.keep < st.len then redis.call('LTRIM', key, 0, plan.keep) end
    if plan.keep > 0 and cmp(log_run(st, plan.keep)[2], plan.cum) ~= 0 then
      redis.call('LSET', key, plan.keep, pair(log_run(st, plan.keep)[1], plan.cum))
    end
  else
    log_front(key, plan.drop, pair(plan.te, plan.base))
  end
  redis.call('PEXPIREAT', key, S(at))
end
