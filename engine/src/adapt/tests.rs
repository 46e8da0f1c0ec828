//! The gate's own tests, on paused time.

use super::*;

fn settings() -> Adaptive {
    Adaptive::resolve(&AdaptiveSection::default(), 32).expect("defaults are valid")
}

#[tokio::test(start_paused = true)]
async fn a_refusal_pauses_the_host_and_lowers_its_limits() {
    let gate = Arc::new(HostGate::new(settings(), None));
    for _ in 0..10 {
        let t = gate.enter().await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        t.finish(Answer::Ok);
    }
    let before = gate.limits().concurrency;
    let t = gate.enter().await;
    t.finish(Answer::Refused(Some(Duration::from_secs(2))));
    let after = gate.limits();
    assert!(after.concurrency < before, "{after:?}");
    assert_eq!(after.decreases, 1);
    assert!(after.rate_per_s.is_some());
    // No try starts before the Retry-After has passed.
    let asked = Instant::now();
    let t = gate.enter().await;
    assert!(asked.elapsed() >= Duration::from_secs(2));
    t.finish(Answer::Ok);
}

#[tokio::test(start_paused = true)]
async fn refusals_of_one_burst_lower_the_limits_once_and_successes_raise_them() {
    let gate = Arc::new(HostGate::new(settings(), None));
    let tries: Vec<InFlight> = vec![gate.enter().await, gate.enter().await];
    for t in tries {
        t.finish(Answer::Refused(None));
    }
    assert_eq!(gate.limits().decreases, 1);
    let low = gate.limits();
    for _ in 0..200 {
        let t = gate.enter().await;
        tokio::time::sleep(Duration::from_millis(20)).await;
        t.finish(Answer::Ok);
    }
    let high = gate.limits();
    assert!(high.concurrency > low.concurrency, "{low:?} -> {high:?}");
    assert!(high.rate_per_s > low.rate_per_s, "{low:?} -> {high:?}");
}

#[test]
fn settings_are_checked() {
    let bad = AdaptiveSection {
        min: Some(10),
        max: Some(4),
        decrease: Some(1.5),
        ..AdaptiveSection::default()
    };
    let problems = Adaptive::resolve(&bad, 8).unwrap_err();
    let keys: Vec<&str> = problems.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["min", "decrease"]);
}

/// A limit that drops from 40 to 10 requests a second and comes back: the
/// achieved rate follows within 5 s each way (32 workers, 50 ms latency),
/// whether the limit held 15 s before it dropped or only 10 (the `adapt-drop`
/// bench's, where the start takes most of them).
#[tokio::test(start_paused = true)]
async fn the_rate_follows_a_limit_that_drops_and_comes_back() {
    for (at, items) in [(15, 1400), (10, 900)] {
        follows_a_drop_at(Duration::from_secs(at), items).await;
    }
}

async fn follows_a_drop_at(drop: Duration, items: u64) {
    let s = Duration::from_secs;
    let host = Arc::new(sim::Host::new(
        vec![(s(0), 40.0), (drop, 10.0), (drop * 2, 40.0)],
        Duration::from_millis(50),
    ));
    let gate = Arc::new(HostGate::new(settings(), None));
    sim::run(Arc::clone(&gate), Arc::clone(&host), 32, items).await;
    let end = host.log.lock().unwrap().last().unwrap().0;
    for sec in 0..end.as_secs() {
        eprintln!(
            "{sec:>3} s: served {:>3}, refused {:>3}",
            host.served_in(s(sec), s(1)),
            host.refused_in(s(sec), s(sec + 1))
        );
    }
    let down = host.follows_after(drop, 10.0);
    let up = host.follows_after(drop * 2, 40.0);
    eprintln!("down {down:?} up {up:?}, {:?}", gate.limits());
    assert!(down.is_some_and(|d| d <= s(5)), "down: {down:?}");
    assert!(up.is_some_and(|d| d <= s(5)), "up: {up:?}");
}

/// A steady limit of 20 requests a second: after the first 5 s the rate
/// sits just under it, and refusals stay rare.
#[tokio::test(start_paused = true)]
async fn a_steady_limit_is_followed_closely_with_few_refusals() {
    let s = Duration::from_secs;
    let host = Arc::new(sim::Host::new(
        vec![(s(0), 20.0)],
        Duration::from_millis(50),
    ));
    let gate = Arc::new(HostGate::new(settings(), None));
    sim::run(Arc::clone(&gate), Arc::clone(&host), 32, 800).await;
    let end = host.log.lock().unwrap().last().unwrap().0;
    let rate = host.served_in(s(5), end - s(5));
    let refused = host.refused_in(s(0), end + s(1));
    eprintln!(
        "{rate:.2}/s after 5 s, {refused} refused of {}",
        host.log.lock().unwrap().len()
    );
    assert!(rate >= 0.85 * 20.0, "{rate}");
    assert!(refused * 50 <= host.log.lock().unwrap().len(), "{refused}");
}

/// Latency 20 ms + 10 ms per request in flight beyond 8: the best fixed
/// concurrency is 8 (400 answers/s); the limit settles there, not at the
/// stage's 32 workers.
#[tokio::test(start_paused = true)]
async fn the_concurrency_settles_at_a_latency_knee() {
    let mut host = sim::Host::new(Vec::new(), Duration::from_millis(20));
    host.knee = Some((8, Duration::from_millis(10)));
    let host = Arc::new(host);
    let gate = Arc::new(HostGate::new(settings(), None));
    let t0 = Instant::now();
    sim::run(Arc::clone(&gate), Arc::clone(&host), 32, 4000).await;
    let per_s = 4000.0 / t0.elapsed().as_secs_f64();
    let limits = gate.limits();
    eprintln!("{per_s:.0}/s, {limits:?}");
    assert!(per_s >= 0.9 * 400.0, "{per_s}/s, {limits:?}");
    assert!((7.0..10.0).contains(&limits.concurrency), "{limits:?}");
}

/// The answers of one burst, each a 503 without `Retry-After`, pause the
/// host for 1 s, not 1 s doubled per answer.
#[tokio::test(start_paused = true)]
async fn a_burst_of_refusals_pauses_once() {
    let gate = Arc::new(HostGate::new(settings(), None));
    let mut tries = Vec::new();
    for _ in 0..8 {
        tries.push(gate.enter().await);
    }
    for t in tries {
        t.finish(Answer::Refused(None));
    }
    let asked = Instant::now();
    let t = gate.enter().await;
    assert_eq!(asked.elapsed(), Duration::from_secs(1));
    t.finish(Answer::Refused(None));
    let asked = Instant::now();
    gate.enter().await.finish(Answer::Ok);
    assert_eq!(
        asked.elapsed(),
        Duration::from_secs(2),
        "a refusal after the pause doubles it"
    );
}

/// A host that answers 503 to everything for 5 s, then 40 requests a
/// second again: few requests while it is down, and afterwards the rate
/// is soon back near the limit (an outage is not a lower rate).
#[tokio::test(start_paused = true)]
async fn an_outage_is_not_taken_for_a_lower_rate() {
    let s = Duration::from_secs;
    let mut host = sim::Host::new(vec![(s(0), 40.0)], Duration::from_millis(50));
    host.down = Some((s(10), s(5)));
    let host = Arc::new(host);
    let gate = Arc::new(HostGate::new(settings(), None));
    sim::run(Arc::clone(&gate), Arc::clone(&host), 32, 1000).await;
    let during = host.refused_in(s(10), s(15));
    let after = host.follows_after(s(15), 40.0);
    eprintln!(
        "{during} refused while down, back {after:?}, {:?}",
        gate.limits()
    );
    assert!(during <= 40, "{during}");
    assert!(after.is_some_and(|d| d <= s(5)), "{after:?}");
}

/// A host that refuses each item's first request whatever the rate (429,
/// `Retry-After: 1`): each refusal pauses the host, but the rate is not cut
/// to a crawl (16 items, 8 workers).
#[tokio::test(start_paused = true)]
async fn refusals_that_are_not_about_the_rate_do_not_starve_the_host() {
    let mut host = sim::Host::new(Vec::new(), Duration::from_millis(10));
    host.refuse_first = true;
    let host = Arc::new(host);
    let gate = Arc::new(HostGate::new(settings(), None));
    let t0 = Instant::now();
    sim::run(Arc::clone(&gate), Arc::clone(&host), 8, 16).await;
    let took = t0.elapsed();
    eprintln!("took {took:?}, {:?}", gate.limits());
    assert!(took <= Duration::from_secs(30), "{took:?}");
}

/// Strict servers (issue 39) at 20 requests a second: a sliding window,
/// a token bucket holding 2 and a fixed window, answering in 40-70 ms plus
/// up to 5-15 ms of jitter, over 12 seeds each (the phase of a fixed
/// window's edge against the gate's pauses differs with each). Over the
/// whole run, from the first answer served to the last, the rate is at
/// 0.92 of the limit or more against either window (a probe that straddled
/// a fixed window's edge held some runs at 0.88) and 0.85 against the
/// bucket (whose first refusal measures its burst, not its rate: the
/// probe must rise through it, and lands low); after the first 5 s, 0.90
/// against all three; at most 2% of the requests are refused.
#[tokio::test(start_paused = true)]
async fn a_strict_limit_is_followed_closely_with_few_refusals() {
    use warpline_testkit::tileserver::Strict;
    let s = Duration::from_secs;
    for (strict, whole) in [
        (Strict::sliding(20), 0.92),
        (Strict::bucket(20.0, 2), 0.85),
        (Strict::fixed(20), 0.92),
    ] {
        for seed in 0..12 {
            let latency = Duration::from_millis(40 + seed % 7 * 5);
            let jitter = Duration::from_millis(5 + seed % 3 * 5);
            let host = Arc::new(sim::Host::strict(strict, latency, jitter).seeded(seed));
            let gate = Arc::new(HostGate::new(settings(), None));
            sim::run(Arc::clone(&gate), Arc::clone(&host), 32, 800).await;
            let (rate, refused) = host.whole_run();
            let end = host.log.lock().unwrap().last().unwrap().0;
            let after = host.served_in(s(5), end - s(5));
            let kind = strict.kind();
            eprintln!(
                "{kind} seed {seed}: {rate:.2}/s, {after:.2}/s after 5 s, {refused:.3} refused"
            );
            assert!(rate >= whole * 20.0, "{kind} seed {seed}: {rate}");
            assert!(
                after >= 0.90 * 20.0,
                "{kind} seed {seed}: {after} after 5 s"
            );
            assert!(refused <= 0.02, "{kind} seed {seed}: {refused} refused");
        }
    }
}

/// At a refusal, tries sent before the refused one that come back after
/// it were let through before it (the server answered them late): they
/// count toward the limit, until a try sent later succeeds.
#[tokio::test(start_paused = true)]
async fn successes_still_on_their_way_at_a_refusal_count_toward_the_limit() {
    let ms = Duration::from_millis;
    let t0 = tokio::time::Instant::now();
    let mut rate = super::rate::Rate::new();
    for i in 0..18 {
        rate.succeeded(t0 + ms(100 + i * 10), t0 + ms(50 + i * 10));
    }
    // The 21st try, sent at 300 ms, refused at 350 ms: 18 got through.
    rate.refused(t0 + ms(350), t0 + ms(300), None);
    let counted = rate.per_s.unwrap();
    assert!((counted - 18.0 * 0.95).abs() < 1e-9, "{counted}");
    // Two sent before it (at 280 and 290 ms) come back after it.
    rate.succeeded(t0 + ms(360), t0 + ms(280));
    rate.succeeded(t0 + ms(370), t0 + ms(290));
    let with_late = rate.per_s.unwrap();
    assert!((with_late - 20.0 * 0.95).abs() < 1e-9, "{with_late}");
    // One sent after it succeeds: the flight is back; the probe rises
    // by its step, and a later straggler no longer counts.
    rate.succeeded(t0 + ms(1400), t0 + ms(1350));
    let probing = rate.per_s.unwrap();
    assert!(probing > with_late + 1.5, "{probing}");
    rate.succeeded(t0 + ms(1410), t0 + ms(295));
    assert!(rate.per_s.unwrap() > probing + 1.5);
}
