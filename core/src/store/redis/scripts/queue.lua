-- sluicegate: the leaky bucket as a queue ('lq', a shaper; core/src/queue.rs).
--
-- Spec: 'lq k p D' (rate k per p ticks in lowest terms, queue bound D = max_delay in ticks).
-- Q = 1 + floor(D*k/p) is the limit. State: (L + Q/r) * k, the last admitted slot scaled by k
-- and offset so that it is never negative: the Rust core's word exactly. The script's
-- `bound` argument (reserve_within) caps the admissible wait at min(D, bound).

local LQ = {}

function LQ.parse(rest)
  local f = need_fields(rest, 3, 'lq')
  local P = { k = f[1], p = f[2], d = f[3] }
  positive(P.k, 'k'); positive(P.p, 'p')
  P.dk = mul(P.d, P.k)
  P.q = add(1, fdiv(P.dk, P.p))
  P.qp = mul(P.q, P.p)
  local reach = add(P.qp, P.dk)
  P.fast = type(P.k) == 'number' and type(reach) == 'number' and reach < TWO53 / 4
  return P
end

function LQ.cap(P) return P.q end
function LQ.creates(P) return false end
function LQ.fresh(P, t) return mul(t, P.k) end
LQ.load = TB.load
LQ.enc = TB.enc
LQ.store = TB.store
function LQ.full_at(P, s) return s, P.k end

local function lq_decision(P, allowed, s, te, retry)
  local ahead = ssub(s, te)
  -- remaining = floor((t + D - max(L, t - 1/r)) * r), never below zero.
  local room = ssub(add(P.dk, P.qp), imax(ahead, sub(P.qp, P.p)))
  return { allowed, P.q, fdiv(room, P.p), cdiv(retry, P.k), cdiv(ahead, P.k) }
end

-- bound: the largest admissible wait in ticks, or nil for D.
function LQ.decide(P, s, t, cost, bound)
  if FAST and P.fast and type(s) == 'number' and type(t) == 'number'
      and (bound == nil or type(bound) == 'number') then
    -- Every value below is at most max(s, t*k) + 3 * (Q*p + D*k), checked below 2^53.
    local k, p, qp, dk = P.k, P.p, P.qp, P.dk
    local now = t * k
    local top = s
    if now > top then top = now end
    if now < TWO53 and top + 3 * (qp + dk) < TWO53 then
      local limit = dk
      if bound ~= nil and bound * k < dk then limit = bound * k end  -- a rounded product >= dk
      local te = now
      if s - (qp + dk) > te then te = s - (qp + dk) end
      local function decision(allowed, s2, retry)
        local ahead = 0
        if s2 > te then ahead = s2 - te end
        local floor_at = qp - p
        if ahead > floor_at then floor_at = ahead end
        local room = dk + qp - floor_at
        if room < 0 then room = 0 end
        return { allowed, P.q, nfloor(room, p), nceil(retry, k), nceil(ahead, k) }
      end
      local x = 0
      if s > te then x = s - te end
      local wait = x + cost * p - qp
      if wait < 0 then wait = 0 end
      if cost == 0 then return decision(true, s, 0), nil end
      if wait <= limit then
        local s2 = te + qp + wait
        return decision(true, s2, wait), s2
      end
      return decision(false, s, wait - limit), nil
    end
  end
  local limit = P.dk
  if bound ~= nil then limit = imin(mul(bound, P.k), P.dk) end
  local now = mul(t, P.k)
  -- The clamp: the state proves a reading of at least L - D; an earlier one sees that.
  local te = imax(now, ssub(s, add(P.qp, P.dk)))
  local x = ssub(s, te)
  -- Wait until the slot max(t, L + c/r): max(0, x + c*p - Q*p), scaled.
  local wait = ssub(add(x, mul(cost, P.p)), P.qp)
  if cost == 0 then
    return lq_decision(P, true, s, te, 0), nil
  end
  if le(wait, limit) then
    local s2 = add(te, add(P.qp, wait))
    return lq_decision(P, true, s2, te, wait), s2
  end
  return lq_decision(P, false, s, te, sub(wait, limit)), nil
end

-- Cancel: L := max(L - c/r, t - Q/r), nothing when the queue is idle.
function LQ.refund(P, s, t, cost)
  local now = mul(t, P.k)
  if le(s, now) or cost == 0 then return nil end
  return imax(ssub(s, mul(imin(cost, P.q), P.p)), now)
end
