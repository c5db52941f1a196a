-- sluicegate: GCRA ('gcra'), the leaky bucket as a meter, in its own terms (core/src/gcra.rs).
--
-- Spec: 'gcra k T b i' (k and T the rate k tokens per T ticks in lowest terms, so that the
-- emission interval of one token is T scaled units; capacity b; initial tokens i). State:
-- TAT * k, the theoretical arrival time scaled by k: the same number as the continuous token
-- bucket's F * k, and every decision equals that bucket's.

local GC = {}

function GC.parse(rest)
  local f = need_fields(rest, 4, 'gcra')
  local P = { k = f[1], t = f[2], b = f[3], i = f[4] }
  positive(P.k, 'k'); positive(P.t, 'T'); positive(P.b, 'b')
  if lt(P.b, P.i) then fail('initial exceeds burst') end
  P.tau = mul(P.b, P.t)                       -- the tolerance b * T
  P.init = mul(sub(P.b, P.i), P.t)
  P.fast = type(P.k) == 'number' and type(P.tau) == 'number' and P.tau < TWO53 / 2
  return P
end

function GC.cap(P) return P.b end
function GC.creates(P) return lt(P.i, P.b) end
function GC.fresh(P, t) return add(mul(t, P.k), P.init) end
GC.load = TB.load
GC.enc = TB.enc
GC.store = TB.store
function GC.full_at(P, tat) return tat, P.k end

-- The decision in doubles for a state tat and a scaled reading now = t * k with max(tat, now)
-- + 2 * tau < 2^53 (the caller checks): as tb_fast (token_bucket.lua), in GCRA's terms.
local function gc_fast(tat, now, tau, T, k, cost)
  local arrival = now
  if tat - tau > arrival then arrival = tat - tau end
  local start = tat
  if arrival > start then start = arrival end
  local new_tat = start + cost * T
  local after = new_tat - arrival
  if after <= tau then
    local new = nil
    if cost ~= 0 then new = new_tat end
    return 1, floor((tau - after) / T), 0, ceil(after / k), new
  end
  local backlog = start - arrival
  return 0, floor((tau - backlog) / T), ceil((after - tau) / k), ceil(backlog / k), nil
end

function GC.decide(P, tat, t, cost)
  if FAST and P.fast and type(tat) == 'number' and type(t) == 'number' then
    local now = t * P.k
    local top = tat
    if now > top then top = now end
    if now < TWO53 and top + 2 * P.tau < TWO53 then
      local ok, rem, retry, reset, new = gc_fast(tat, now, P.tau, P.t, P.k, cost)
      return { ok == 1, P.b, rem, retry, reset }, new
    end
  end
  local now = mul(t, P.k)
  -- A reading earlier than TAT - tau is seen as TAT - tau (no more than a full bucket).
  local arrival = imax(now, ssub(tat, P.tau))
  local start = imax(tat, arrival)
  local new_tat = add(start, mul(cost, P.t))
  local after = sub(new_tat, arrival)
  if le(after, P.tau) then
    local new = nil
    if cost ~= 0 then new = new_tat end
    return { true, P.b, fdiv(sub(P.tau, after), P.t), 0, cdiv(after, P.k) }, new
  end
  local backlog = sub(start, arrival)
  return { false, P.b, fdiv(sub(P.tau, backlog), P.t), cdiv(sub(after, P.tau), P.k),
           cdiv(backlog, P.k) }, nil
end

function GC.refund(P, tat, t, cost)
  local now = mul(t, P.k)
  if le(tat, now) or cost == 0 then return nil end
  return imax(ssub(tat, mul(imin(cost, P.b), P.t)), now)
end
