//! Forgetting: Ebbinghaus decay golden values, config validation, decay clocks.
#![allow(clippy::unwrap_used)] // helpers outside #[test] fns unwrap fixed literals

use chrono::{DateTime, Duration, Utc};
use soul_mem_core::forget::*;
use soul_mem_core::model::*;

fn t0() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
        .unwrap()
        .with_timezone(&Utc)
}

fn situation(id: &str, narrative: &str) -> MemoryNote {
    MemoryNote::new(
        "小红",
        id,
        MemoryType::Situation(Situation::SpecificSituation(SpecificSituation {
            narrative: narrative.into(),
            time_span: None,
            context: Context::default(),
        })),
        t0(),
    )
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

#[test]
fn golden_half_life_values() {
    let cfg = ForgetConfig::default();
    assert!(close(retention(24.0, 0, &cfg), 0.5));
    assert!(close(missing_degree_at(24.0, 0, &cfg), 0.5));
    assert!(close(retention(48.0, 0, &cfg), 0.25));
    // 10 recalls: half-life 24 × (1 + 0.1 × 10) = 48 h.
    assert!(close(cfg.adjusted_half_life(10), 48.0));
    assert!(close(retention(48.0, 10, &cfg), 0.5));
    // The cap: 200 recalls count as 50 → half-life 144 h.
    assert!(close(cfg.adjusted_half_life(200), 144.0));
    assert!(close(retention(144.0, 200, &cfg), 0.5));
    assert!(close(retention(144.0, 50, &cfg), 0.5));
    // 4 h at half-life 24 h: 2^(-1/6).
    assert!(close(retention(4.0, 0, &cfg), 2f64.powf(-1.0 / 6.0)));
}

#[test]
fn non_positive_or_nan_time_is_full_retention() {
    let cfg = ForgetConfig::default();
    assert_eq!(retention(0.0, 0, &cfg), 1.0);
    assert_eq!(retention(-5.0, 3, &cfg), 1.0);
    assert_eq!(retention(f64::NAN, 0, &cfg), 1.0);
    assert_eq!(missing_degree_at(-1.0, 0, &cfg), 0.0);
}

#[test]
fn retention_is_monotone_in_time_and_activation() {
    let cfg = ForgetConfig::default();
    let mut prev = 1.0;
    for h in [1.0, 6.0, 12.0, 24.0, 48.0, 96.0, 168.0, 1000.0] {
        let r = retention(h, 0, &cfg);
        assert!(r < prev && r > 0.0, "{h}: {r}");
        prev = r;
    }
    let mut prev = 0.0;
    for c in [0, 1, 5, 20, 50] {
        let r = retention(48.0, c, &cfg);
        assert!(r > prev);
        prev = r;
    }
    assert_eq!(retention(48.0, 50, &cfg), retention(48.0, 51, &cfg));
}

#[test]
fn edge_decay_follows_source() {
    let cfg = ForgetConfig::default();
    assert!(close(edge_decay_intensity(0.8, 0.5), 0.4));
    let src = situation("s", "那天下雨");
    let dst = situation("d", "第二天放晴");
    let link = MemoryLink {
        id: LinkId::random(),
        from: src.id,
        to: dst.id,
        intensity: 0.8,
        link_type: MemoryLinkType::Sem(SemMemLink {
            verb: "之后".into(),
            confidence: 1.0,
        }),
    };
    let now = t0() + Duration::hours(24);
    assert!(close(decayed_intensity(&link, &src, now, &cfg), 0.4));
    assert!(close(decay_factor(&src, now, &cfg), 0.5));
    assert!(close(missing_degree(&src, now, &cfg), 0.5));
}

#[test]
fn non_forgetting_kinds_and_core_notes_do_not_decay() {
    let cfg = ForgetConfig::default();
    let now = t0() + Duration::hours(1000);
    let proc = MemoryNote::new(
        "小红",
        "p",
        MemoryType::Procedure(ProcMemory {
            action: Action {
                content: "挥手".into(),
                action_type: ActionType::Speak,
            },
        }),
        t0(),
    );
    assert_eq!(decay_factor(&proc, now, &cfg), 1.0);
    let abs = MemoryNote::new(
        "小红",
        "a",
        MemoryType::Situation(Situation::AbstractSituation(AbstractSituation::Location(
            Location {
                name: "学校".into(),
                coordinates: String::new(),
            },
        ))),
        t0(),
    );
    assert_eq!(decay_factor(&abs, now, &cfg), 1.0);
    let mut core = situation("c", "我是小红");
    core.core = true;
    assert_eq!(decay_factor(&core, now, &cfg), 1.0);
}

#[test]
fn clock_since_last_access_restarts_the_curve() {
    let mut note = situation("s", "在老街吃麻辣烫");
    note.record_retrieval(t0() + Duration::hours(48));
    let now = t0() + Duration::hours(72);
    let created = ForgetConfig::default();
    let access = ForgetConfig {
        clock: DecayClock::SinceLastAccess,
        ..ForgetConfig::default()
    };
    // One recall: half-life 26.4 h.
    let hl = 24.0 * 1.1;
    assert!(close(
        decay_factor(&note, now, &created),
        0.5f64.powf(72.0 / hl)
    ));
    assert!(close(
        decay_factor(&note, now, &access),
        0.5f64.powf(24.0 / hl)
    ));
}

#[test]
fn config_defaults_serde_and_validation() {
    let cfg = ForgetConfig::default();
    assert_eq!(cfg.base_half_life_hours, 24.0);
    assert_eq!(cfg.active_factor, 0.1);
    assert_eq!(cfg.max_activation_cap, 50);
    assert_eq!(cfg.mask_threshold, 0.05);
    assert_eq!(cfg.revise_threshold, 0.15);
    assert!(cfg.validate().is_ok());
    // The seed's Forget JSON config block parses; missing fields take defaults.
    let parsed = ForgetConfig::from_json(
        r#"{"base_half_life_hours": 24.0, "active_factor": 0.1, "max_activation_cap": 50}"#,
    )
    .unwrap();
    assert_eq!(parsed, cfg);
    let access = ForgetConfig::from_json(r#"{"clock": "since_last_access"}"#).unwrap();
    assert_eq!(access.clock, DecayClock::SinceLastAccess);
    // Unknown fields are rejected.
    let e = ForgetConfig::from_json(r#"{"half_life": 24}"#).unwrap_err();
    assert_eq!(e.kind(), "invalid_json");
    for bad in [
        r#"{"base_half_life_hours": 0}"#,
        r#"{"base_half_life_hours": -1}"#,
        r#"{"active_factor": -0.1}"#,
        r#"{"mask_threshold": 1.5}"#,
        r#"{"mask_threshold": 0.3, "revise_threshold": 0.2}"#,
        r#"{"prune_threshold": -1}"#,
    ] {
        let e = ForgetConfig::from_json(bad).unwrap_err();
        assert_eq!(e.kind(), "invalid_argument", "{bad}");
    }
    let inf = ForgetConfig {
        base_half_life_hours: f64::INFINITY,
        ..ForgetConfig::default()
    };
    assert!(inf.validate().is_err());
    let nan = ForgetConfig {
        active_factor: f64::NAN,
        ..ForgetConfig::default()
    };
    assert!(nan.validate().is_err());
}
