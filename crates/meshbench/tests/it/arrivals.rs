//! `meshbench backend --arrivals FILE` against a load whose evenness is known: the target's own
//! record of when requests arrived (issue 26) counts what the generator sent and sees its pace.

use crate::common;

use std::time::{Duration, Instant};

use common::*;

const LIMIT: Duration = Duration::from_secs(30);

#[test]
fn the_backend_sees_an_even_load_arrive_evenly() {
    let began = Instant::now();
    let file = temp_json("arrivals-summary");
    let _ = std::fs::remove_file(&file);
    let backend = BackendProc::start(&["--size", "64", "--arrivals", file.to_str().unwrap()]);
    let (out, r) = run_json(
        "arrivals-run",
        &[&backend.url("/"), "-r", "500", "-d", "3s"],
        LIMIT,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    // SIGTERM to the backend's group, as the lab stops a role; it writes the file, then exits.
    drop(backend);
    let text = std::fs::read_to_string(&file).expect("the backend wrote its arrivals");
    let _ = std::fs::remove_file(&file);
    let a: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");

    let ok = u(&r, "/requests/ok") as f64;
    let trimmed = f(&a, "/trimmed_secs");
    assert_eq!(trimmed, 1.0, "{a}");
    // The run's requests minus the trimmed seconds' share of its 3 s.
    let want = ok * (3.0 - 2.0 * trimmed) / 3.0;
    let got = u(&a, "/requests") as f64;
    assert!(
        (got - want).abs() <= 0.02 * want,
        "{got} arrivals, want {want:.0}: {a}"
    );
    assert!(
        u(&a, "/recorded") as f64 >= ok,
        "every request arrived: {a}"
    );
    assert_eq!(u(&a, "/dropped"), 0);
    let p50 = f(&a, "/gap_us/p50");
    assert!((p50 - 2_000.0).abs() <= 400.0, "p50 gap {p50} us: {a}");
    for k in ["min", "p90", "p99", "p999", "max", "mean"] {
        assert!(f(&a, &format!("/gap_us/{k}")) >= 0.0, "{k}: {a}");
    }
    assert!(u(&a, "/largest_burst_per_ms") >= 1, "{a}");
    assert!((f(&a, "/rate_rps") - 500.0).abs() < 25.0, "{a}");
    assert!(
        began.elapsed() < Duration::from_secs(10),
        "took {:?}",
        began.elapsed()
    );
}
