//! Per-request overhead of the rate-limit layers through axum's own machinery (tower's
//! `oneshot` on a `Router`, no network): axum alone, sluicegate-tower (IETF fields, or
//! none), tower_governor (no fields, or its `use_headers`). One peer address, a quota that
//! never runs dry. `src/bin/httpbench.rs` measures the same subjects on a real server.

use criterion::{criterion_group, criterion_main, Criterion};
use sluicegate_benches::http::{app, request, SUBJECTS};
use std::hint::black_box;
use tower::ServiceExt;

fn oneshot(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    let peer = "203.0.113.7:52100".parse().expect("an address");
    let mut g = c.benchmark_group("http/oneshot");
    for name in SUBJECTS {
        let router = app(name);
        g.bench_function(*name, |b| {
            b.iter(|| {
                let resp = rt
                    .block_on(router.clone().oneshot(request(peer)))
                    .expect("infallible");
                assert!(resp.status().is_success());
                black_box(resp)
            })
        });
    }
    g.finish();
}

criterion_group!(benches, oneshot);
criterion_main!(benches);
