//! [`RedisBucket`], a single limiter's bucket on Redis, and composite limits over such
//! buckets in one script call.

use super::link::Request;
use super::link::{slot, RedisStats};
use super::store::{name_fingerprint, Ask, Common, Name, Op};
use crate::error::{Error, StoreErrorKind};
use crate::store::spec::Topology;
use crate::store::StoreSpec;
use crate::{Decision, Quota};

/// A single limiter's bucket on Redis: what `Limiter::builder(quota).store(..)` keeps.
pub(crate) struct RedisBucket {
    c: Common,
    name: String,
    fp: u128,
    codec: crate::algorithm::Codec,
}

impl RedisBucket {
    /// The bucket `spec` names for `quota`, created now (`origin` on the limiter's clock) if
    /// it does not exist, as an in-process limiter's is at construction (SCRIPTS.md, "Absent
    /// keys"). The creation is one cost-0 request; when it gets no answer (the server is down
    /// or slow), the bucket is created by the first request that reaches the server instead,
    /// with `initial` tokens then (fewer than it would have had: never an extra admission).
    pub(crate) fn open(spec: &StoreSpec, quota: &Quota, origin: u64) -> Result<Self, Error> {
        let c = Common::open(spec, quota, origin, true)?;
        let name = format!("{}{{{}}}", c.head, c.tag);
        let fp = name_fingerprint(name.as_str());
        let codec = crate::algorithm::Codec::new(quota, origin)?;
        let b = RedisBucket { c, name, fp, codec };
        b.c.create(Name::Made(&b.name), b.fp, origin);
        Ok(b)
    }

    pub(crate) fn codec(&self) -> &crate::algorithm::Codec {
        &self.codec
    }

    pub(crate) fn stats(&self) -> RedisStats {
        self.c.stats()
    }

    pub(crate) fn check(&self, now: u64, cost: u64) -> Result<(), Error> {
        self.codec.check(now, cost)
    }

    fn ask(op: Op, now: u64, cost: u64, bound: Option<u64>) -> Ask {
        Ask {
            op,
            now,
            cost,
            bound,
            look: false,
        }
    }

    fn one(&self, ask: Ask) -> Result<Decision, Error> {
        if ask.op != Op::Refund {
            self.check(ask.now, ask.cost)?;
        }
        self.c.request(Name::Made(&self.name), self.fp, ask)
    }

    pub(crate) fn reserve(&self, now: u64, cost: u64, within: u64) -> Result<Decision, Error> {
        self.one(Self::ask(Op::Acquire, now, cost, Common::bound(within)))
    }

    /// The decision a request of `cost` would get (a composite's look at a part, answered
    /// by the fail policy when the server does not answer, as the part's decision would be).
    pub(crate) fn peek(&self, now: u64, cost: u64) -> Result<Decision, Error> {
        self.one(Self::ask(Op::Peek, now, cost, None))
    }

    /// `Limiter::peek`: a request of cost 0 (as in-process), but a look ([`Ask::look`]): an
    /// error when the server does not answer, whatever the fail policy.
    pub(crate) fn look(&self, now: u64) -> Result<Decision, Error> {
        let ask = Ask {
            look: true,
            ..Self::ask(Op::Acquire, now, 0, None)
        };
        self.one(ask)
    }

    pub(crate) fn refund(&self, now: u64, cost: u64) -> Result<(), Error> {
        self.one(Self::ask(Op::Refund, now, cost, None)).map(drop)
    }

    pub(crate) fn is_full(&self, now: u64) -> Result<bool, Error> {
        let ask = Ask {
            look: true,
            ..Self::ask(Op::Peek, now, 0, None)
        };
        Ok(self.one(ask)?.reset_after_nanos() == 0)
    }

    pub(crate) async fn acquire_async(&self, now: u64, cost: u64) -> Result<Decision, Error> {
        self.check(now, cost)?;
        let ask = Self::ask(Op::Acquire, now, cost, None);
        let name = Name::Made(&self.name);
        self.c.request_async(name, self.fp, ask).await
    }

    pub(crate) async fn peek_async(&self, now: u64) -> Result<Decision, Error> {
        self.check(now, 0)?;
        let ask = Ask {
            look: true,
            ..Self::ask(Op::Peek, now, 0, None)
        };
        let name = Name::Made(&self.name);
        self.c.request_async(name, self.fp, ask).await
    }

    pub(crate) async fn refund_async(&self, now: u64, cost: u64) -> Result<(), Error> {
        let ask = Self::ask(Op::Refund, now, cost, None);
        let name = Name::Made(&self.name);
        self.c.request_async(name, self.fp, ask).await.map(drop)
    }
}

impl RedisBucket {
    /// The store, as errors name it (its URL, the password redacted).
    pub(crate) fn store_name(&self) -> String {
        self.c.name.clone()
    }
}

impl core::fmt::Debug for RedisBucket {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RedisBucket")
            .field("store", &self.c.name)
            .field("key", &self.name)
            .finish_non_exhaustive()
    }
}

/// The call of a composite limit over Redis buckets, when it can be one call: `None` when the
/// parts are not all on one deployment with one clock (the caller then runs the in-process
/// protocol over them: docs/REDIS.md, "Composite limits"), an error when they cannot share a
/// call (Redis Cluster slots).
type CallParts<'a> = (Vec<String>, Vec<(&'a Common, u128)>);

fn composite_call<'a>(parts: &[&'a RedisBucket]) -> Option<Result<CallParts<'a>, Error>> {
    let first = &parts[0].c;
    if parts
        .iter()
        .any(|p| !p.c.link().same_as(first.link()) || p.c.tick != first.tick)
    {
        return None;
    }
    let names: Vec<String> = parts.iter().map(|p| p.name.clone()).collect();
    let fps = parts.iter().map(|p| (&p.c, p.fp)).collect();
    for (i, n) in names.iter().enumerate() {
        if names[..i].contains(n) {
            return Some(Err(Error::store(
                StoreErrorKind::Unsupported,
                first.name.clone(),
                format!("two parts of a composite limit name one bucket ({n}): give them different prefixes"),
            )));
        }
    }
    if first.link().topology == Topology::Cluster {
        let s0 = slot(&names[0]);
        if let Some(n) = names.iter().find(|n| slot(n) != s0) {
            return Some(Err(Error::store(
                StoreErrorKind::Unsupported,
                first.name.clone(),
                format!(
                    "the parts of a composite limit on Redis Cluster must share a hash slot: \
                     {} and {n} do not; give every part the same tag (?tag=NAME)",
                    names[0]
                ),
            )));
        }
    }
    Some(Ok((names, fps)))
}

/// The composite's args: the common ones with each part's spec.
fn composite_args(parts: &[&RedisBucket], ask: Ask) -> Vec<String> {
    let mut a = parts[0].c.args(ask);
    a.extend(parts.iter().map(|p| p.c.spec().text.clone()));
    a
}

/// The checks before a composite acquisition (a cost above a part's capacity, a reading out
/// of range), or the call; a refund clears the parts' cached rejections first.
fn composite_prepare<'a>(
    parts: &[&'a RedisBucket],
    ask: Ask,
) -> Option<Result<(CallParts<'a>, Vec<String>), Error>> {
    let call = match composite_call(parts)? {
        Ok(x) => x,
        Err(e) => return Some(Err(e)),
    };
    if ask.op != Op::Refund {
        if let Some(e) = parts.iter().find_map(|p| p.check(ask.now, ask.cost).err()) {
            return Some(Err(e));
        }
    } else {
        // As a refund on one bucket does: the parts' cached rejections may no longer hold.
        parts.iter().for_each(|p| p.c.forget(p.fp));
    }
    Some(Ok((call, composite_args(parts, ask))))
}

/// A composite request over Redis buckets in one script call (SEMANTICS.md, "Composite
/// limits", all-or-nothing on the server); `None` when it cannot be one call.
pub(crate) fn composite(
    parts: &[&RedisBucket],
    now: u64,
    cost: u64,
    refund: bool,
) -> Option<Result<(Decision, Vec<Decision>), Error>> {
    let op = if refund { Op::Refund } else { Op::Acquire };
    let ask = RedisBucket::ask(op, now, cost, None);
    let ((names, fps), args) = match composite_prepare(parts, ask)? {
        Ok(x) => x,
        Err(e) => return Some(Err(e)),
    };
    let c = &parts[0].c;
    let r = c
        .live_link()
        .and_then(|l| l.call_blocking(Request::Run { keys: names, args }));
    Some(c.finish(r, &fps, ask))
}

/// [`composite`] for async callers.
pub(crate) async fn composite_async(
    parts: &[&RedisBucket],
    now: u64,
    cost: u64,
) -> Option<Result<(Decision, Vec<Decision>), Error>> {
    let ask = RedisBucket::ask(Op::Acquire, now, cost, None);
    let ((names, fps), args) = match composite_prepare(parts, ask)? {
        Ok(x) => x,
        Err(e) => return Some(Err(e)),
    };
    let c = &parts[0].c;
    let r = match c.live_link_async().await {
        Ok(l) => l.call_async(Request::Run { keys: names, args }).await,
        Err(f) => Err(f),
    };
    Some(c.finish(r, &fps, ask))
}
