//! The scripts as the server receives them (SCRIPTS.md, "Files and loading"), and a quota's
//! spec in the scripts' terms (SCRIPTS.md, "From a `Quota` to a spec").

use crate::error::Error;
use crate::{Algorithm, Quota, Refill};
use std::sync::atomic::{AtomicPtr, Ordering};

/// The library body followed by the EVAL form's tail.
pub(crate) const EVAL_FORM: &str = concat!(
    include_str!("scripts/int.lua"),
    include_str!("scripts/token_bucket.lua"),
    include_str!("scripts/gcra.lua"),
    include_str!("scripts/window.lua"),
    include_str!("scripts/queue.lua"),
    include_str!("scripts/log.lua"),
    include_str!("scripts/main.lua"),
    include_str!("scripts/fast.lua"),
    include_str!("scripts/entry_eval.lua"),
);

const FUNCTION_BODY: &str = concat!(
    include_str!("scripts/head_function.lua"),
    include_str!("scripts/int.lua"),
    include_str!("scripts/token_bucket.lua"),
    include_str!("scripts/gcra.lua"),
    include_str!("scripts/window.lua"),
    include_str!("scripts/queue.lua"),
    include_str!("scripts/log.lua"),
    include_str!("scripts/main.lua"),
    include_str!("scripts/fast.lua"),
    include_str!("scripts/entry_function.lua"),
);

/// Which function a call names (SCRIPTS.md, "Calling convention" and "The one-bucket
/// functions").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Func {
    /// `NAME`: every request.
    Run,
    /// `NAME_tb`: one bucket of a continuous token bucket, acquire.
    Tb,
    /// `NAME_gcra`: one bucket of GCRA, acquire.
    Gcra,
}

/// Both forms, assembled once per process.
pub(crate) struct Scripts {
    /// SHA-1 of the EVAL form (EVALSHA).
    pub(crate) sha: String,
    /// The library and function name: `sluicegate_` and the SHA-1's first 16 hex digits.
    pub(crate) name: String,
    /// The FUNCTION LOAD form.
    pub(crate) library: String,
    /// `NAME_tb`, `NAME_gcra`.
    one: [String; 2],
}

impl Scripts {
    /// The name of `f` in the library.
    pub(crate) fn function(&self, f: Func) -> &str {
        match f {
            Func::Run => &self.name,
            Func::Tb => &self.one[0],
            Func::Gcra => &self.one[1],
        }
    }
}

/// The scripts' texts and names, made once per process. Lock-free: threads that come first
/// together each make them and one copy is kept, where a `OnceLock` that a thread of the
/// parent was initialising at a `fork()` would block a child for good (see `store::fork`).
pub(crate) fn scripts() -> &'static Scripts {
    static S: AtomicPtr<Scripts> = AtomicPtr::new(core::ptr::null_mut());
    let p = S.load(Ordering::Acquire);
    if !p.is_null() {
        // SAFETY: a non-null pointer in `S` came from `Box::into_raw` below and is never
        // freed (leaked for the process's life).
        return unsafe { &*p };
    }
    let sha = redis::Script::new(EVAL_FORM).get_hash().to_string();
    let name = format!("sluicegate_{}", &sha[..16]);
    let library = format!(
        "#!lua name={name}\n{}",
        FUNCTION_BODY.replace("SLUICEGATE_NAME", &name)
    );
    let one = [format!("{name}_tb"), format!("{name}_gcra")];
    let made = Box::into_raw(Box::new(Scripts {
        sha,
        name,
        library,
        one,
    }));
    match S.compare_exchange(
        core::ptr::null_mut(),
        made,
        Ordering::AcqRel,
        Ordering::Acquire,
    ) {
        // SAFETY: `made` is now `S`'s, never freed.
        Ok(_) => unsafe { &*made },
        Err(kept) => {
            // SAFETY: `made` came from `Box::into_raw` above and was never shared.
            drop(unsafe { Box::from_raw(made) });
            // SAFETY: `kept` is `S`'s, never freed, as above.
            unsafe { &*kept }
        }
    }
}

pub(super) fn gcd(mut a: u128, mut b: u128) -> u128 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// `quota`'s spec, with `tick` nanoseconds a tick (1000 in production, 1 on the test clock)
/// and the interval grid's origin at `origin` ticks; refused (`InvalidQuota`) when a length is
/// not a whole number of ticks.
pub(crate) fn spec(q: &Quota, tick: u64, origin: u64) -> Result<String, Error> {
    q.validate()?;
    let (k, p) = (u128::from(q.count()), u128::from(q.period_ns()));
    let t = u128::from(tick);
    let whole = |ns: u64, what: &str| {
        if ns % tick == 0 {
            Ok(ns / tick)
        } else {
            Err(Error::invalid(format!(
                "the Redis store counts time in microseconds: the {what} ({ns} ns) is not a \
                 whole number of them"
            )))
        }
    };
    // The rate k/P per ns is (tick*k)/P per tick, in lowest terms.
    let g = gcd(k * t, p);
    let (kk, pp) = (k * t / g, p / g);
    let (b, i) = (q.burst(), q.initial());
    Ok(match (q.algorithm(), q.refill()) {
        (Algorithm::TokenBucket, Refill::Continuous) => format!("tb {kk} {pp} {b} {i}"),
        (Algorithm::TokenBucket, Refill::Interval) => {
            format!(
                "ti {k} {} {b} {i} {origin}",
                whole(q.period_ns(), "period")?
            )
        }
        (Algorithm::Gcra, _) => format!("gcra {kk} {pp} {b} {i}"),
        (Algorithm::LeakyQueue, _) => {
            format!("lq {kk} {pp} {}", whole(q.max_delay_ns(), "max_delay")?)
        }
        (a, _) => {
            let name = match a {
                Algorithm::FixedWindow => "fw",
                Algorithm::SlidingWindow => "sw",
                _ => "sl",
            };
            format!("{name} {k} {}", whole(q.period_ns(), "window")?)
        }
    })
}

/// A quota as the scripts take it: its spec, and the one-bucket function with its quota
/// arguments when there is one (none with `scripts=eval`, whose form has only `run`).
pub(crate) struct Spec {
    pub(crate) text: String,
    pub(crate) one: Option<(Func, [String; 4])>,
}

impl Spec {
    pub(crate) fn new(text: String, eval: bool) -> Spec {
        let one = if eval { None } else { one_bucket(&text) };
        Spec { text, one }
    }

    /// The same quota with its initial tokens raised to its capacity, when they differ: what
    /// a single limiter's bucket is once created (SCRIPTS.md, "Absent keys").
    pub(crate) fn refilled(&self, eval: bool) -> Option<Spec> {
        let mut w: Vec<&str> = self.text.split(' ').collect();
        let fields = match w.first() {
            Some(&"tb" | &"gcra") => 5,
            Some(&"ti") => 6,
            _ => return None,
        };
        if w.len() != fields || w[3] == w[4] {
            return None;
        }
        w[4] = w[3];
        Some(Spec::new(w.join(" "), eval))
    }
}

/// The function that decides a one-bucket acquisition of `spec` by itself, and its quota
/// arguments (`k p b i`), when there is one (SCRIPTS.md, "The one-bucket functions").
pub(crate) fn one_bucket(spec: &str) -> Option<(Func, [String; 4])> {
    let mut w = spec.split(' ');
    let f = match w.next()? {
        "tb" => Func::Tb,
        "gcra" => Func::Gcra,
        _ => return None,
    };
    let mut quota: [String; 4] = Default::default();
    for q in &mut quota {
        *q = w.next()?.to_string();
    }
    w.next().is_none().then_some((f, quota))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_follow_scripts_md() {
        let s = |q: &str, tick| spec(&q.parse().unwrap(), tick, 0);
        assert_eq!(s("100/s", 1000).unwrap(), "tb 1 10000 100 100");
        assert_eq!(
            s("1000003/hour", 1000).unwrap(),
            "tb 1000003 3600000000 1000003 1000003"
        );
        assert_eq!(
            s("10/s; algorithm=gcra", 1).unwrap(),
            "gcra 1 100000000 10 10"
        );
        assert_eq!(
            s("5/2s; refill=interval", 1000).unwrap(),
            "ti 5 2000000 5 5 0"
        );
        assert_eq!(
            s("3/m; algorithm=fixed_window", 1000).unwrap(),
            "fw 3 60000000"
        );
        assert_eq!(
            s("10/s; algorithm=leaky_queue; max_delay=250ms", 1000).unwrap(),
            "lq 1 100000 250000"
        );
        assert!(s("3/ns; algorithm=sliding_window", 1000).is_err());
        assert!(s("3/ns; algorithm=sliding_window", 1).is_ok());
        assert!(s("3/ns", 1000).is_ok(), "a rate is rescaled exactly");
    }

    #[test]
    fn one_bucket_functions() {
        let (f, q) = one_bucket("tb 1 10000 100 50").unwrap();
        assert_eq!((f, q.join(" ").as_str()), (Func::Tb, "1 10000 100 50"));
        assert_eq!(one_bucket("gcra 3 7 2 2").unwrap().0, Func::Gcra);
        assert!(one_bucket("ti 5 2000000 5 5 0").is_none());
        assert!(one_bucket("fw 3 60000000").is_none());
        assert_eq!(
            scripts().function(Func::Tb),
            format!("{}_tb", scripts().name)
        );
        assert!(
            Spec::new("tb 1 1 5 5".into(), true).one.is_none(),
            "scripts=eval"
        );
    }

    #[test]
    fn refilled_specs() {
        let r = |t: &str| Spec::new(t.into(), false).refilled(false).map(|s| s.text);
        assert_eq!(
            r("tb 1 10000 100 50").as_deref(),
            Some("tb 1 10000 100 100")
        );
        assert_eq!(r("gcra 1 7 9 0").as_deref(), Some("gcra 1 7 9 9"));
        assert_eq!(
            r("ti 5 2000000 5 2 0").as_deref(),
            Some("ti 5 2000000 5 5 0")
        );
        assert_eq!(r("tb 1 10000 100 100"), None, "initial == burst");
        assert_eq!(r("fw 3 60000000"), None);
        let s = Spec::new("tb 1 10000 100 50".into(), false)
            .refilled(false)
            .unwrap();
        assert_eq!(s.one.unwrap().1[3], "100");
    }

    #[test]
    fn forms_are_assembled() {
        let sc = scripts();
        assert_eq!(sc.sha.len(), 40);
        assert!(sc.library.starts_with(&format!("#!lua name={}\n", sc.name)));
        assert!(!sc.library.contains("SLUICEGATE_NAME"));
    }
}
