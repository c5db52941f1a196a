//! `acquire()`: the core's acquire plan (`start_acquire`/`poll_acquire`, the one wait policy of
//! every language) in a small native object that `index.js` polls from its timer callbacks.
//! JavaScript keeps only its sleep (a timer, so the event loop never blocks) and its
//! interruption (an `AbortSignal`, after which `cancel` gives an admitted slot back).

use crate::api::{env_state, u64_of, u64_opt};
use crate::errors::{from_core, invalid_arg, JsErr};
use crate::hot::write_scratch;
use crate::keys::with_key;
use crate::state::Entry;
use napi::bindgen_prelude::*;
use napi_derive::napi;
use sluicegate::{composite, Next};
use std::sync::Arc;
use std::time::Duration;

/// `Next` as the number `poll` returns (`index.js` reads these three).
const ADMIT: u32 = 0;
const REJECT: u32 = 1;
const RETRY: u32 = 2;

/// What an acquire polls, with its plan.
enum Target {
    Single(sluicegate::AcquirePlan),
    /// The key's bytes, copied when the acquire starts.
    Keyed(Box<[u8]>, sluicegate::AcquirePlan),
    Composite(sluicegate::AcquirePlan),
}

/// One pending `acquire()`: made by `acquireStart`, polled by `index.js`.
/// It holds the limiter itself, so a limiter collected while an acquire waits stays alive
/// until the acquire ends.
#[napi]
pub struct AcquirePlan {
    entry: Arc<Entry>,
    target: Target,
}

#[napi]
impl AcquirePlan {
    /// One round of the core's plan now, the decision written to `scratch`: 0 admitted (wait
    /// `retryAfter`, a leaky queue's slot, then go ahead), 1 rejected (the outcome), 2 not yet
    /// (sleep `retryAfter` and poll again).
    #[napi]
    pub fn poll(&mut self, env: Env) -> std::result::Result<u32, JsErr> {
        let next = match &mut self.target {
            Target::Single(plan) => self.entry.single()?.poll_acquire(plan),
            Target::Keyed(key, plan) => self.entry.keyed()?.poll_acquire(&key[..], plan),
            Target::Composite(plan) => {
                composite::poll_acquire_all(&Entry::parts(self.entry.composite()?), plan)
            }
        }
        .map_err(from_core)?;
        let (kind, d) = match next {
            Next::Admit(d) => (ADMIT, d),
            Next::Reject(d) => (REJECT, d),
            Next::Retry(d) => (RETRY, d),
        };
        write_scratch(env_state(&env)?, &d);
        Ok(kind)
    }

    /// Gives the admitted cost back: the wait after an admission was interrupted.
    #[napi]
    pub fn cancel(&self) -> std::result::Result<(), JsErr> {
        match &self.target {
            Target::Single(plan) => self.entry.single()?.cancel(plan.cost()),
            Target::Keyed(key, plan) => self.entry.keyed()?.cancel(&key[..], plan.cost()),
            Target::Composite(plan) => return self.entry.refund(plan.cost()),
        }
        .map_err(from_core)
    }
}

/// Starts an acquire of `cost` within `maxWaitNs` (absent: no deadline) on the limiter or
/// composite `handle`, or of `key`'s bucket on the keyed limiter `handle`.
#[napi(
    ts_args_type = "handle: number, cost: number | bigint, maxWaitNs?: number | bigint, key?: string | Uint8Array | number | bigint"
)]
pub fn acquire_start(
    env: Env,
    handle: u32,
    cost: Unknown,
    max_wait_ns: Option<Unknown>,
    key: Option<Unknown>,
) -> std::result::Result<AcquirePlan, JsErr> {
    let cost = u64_of(&cost, "cost")?;
    let max_wait = u64_opt(max_wait_ns, "maxWaitNs")?.map_or(Duration::MAX, Duration::from_nanos);
    let entry = env_state(&env)?.get(handle)?;
    let target = match (&*entry, key) {
        (Entry::Single(l), None) => Target::Single(l.start_acquire(cost, max_wait)),
        (Entry::Composite(parts), None) => Target::Composite(composite::start_acquire_all(
            &Entry::parts(parts),
            cost,
            max_wait,
        )),
        (Entry::Keyed(l), Some(key)) => {
            // SAFETY: `key` is an argument of the running call; the closure copies the bytes.
            let key = unsafe { with_key(key.env(), key.raw(), |k| Box::<[u8]>::from(k)) }?;
            Target::Keyed(key, l.start_acquire(cost, max_wait))
        }
        (Entry::Remote(_), _) => return Err(crate::state::remote_sync()),
        (Entry::Keyed(_), None) => return Err(invalid_arg("a KeyedLimiter's acquire needs a key")),
        (_, Some(_)) => return Err(invalid_arg("only a KeyedLimiter's acquire takes a key")),
    };
    Ok(AcquirePlan { entry, target })
}
