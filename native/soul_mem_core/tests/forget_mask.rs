//! Forgetting: deterministic, monotone jieba masking (including a seeded property test).
#![allow(clippy::unwrap_used)] // helpers outside #[test] fns unwrap fixed literals

use soul_mem_core::forget::*;
use soul_mem_core::rng::SplitMix64;

const PIECES: &[&str] = &[
    "小红",
    "和",
    "小白",
    "放学后",
    "去",
    "老街",
    "吃",
    "麻辣烫",
    "，",
    "。",
    "她",
    "把",
    "汤",
    "打翻",
    "了",
    "昨天",
    "下午",
    "我们",
    "团队",
    "在",
    "会议室",
    "开",
    "Sprint",
    "回顾",
    "会议",
    "I",
    "wrote",
    "an",
    "HTTP",
    "server",
    "in",
    "Rust",
    " ",
    "  ",
    "😀",
    "🍜",
    "!",
    "?",
    "123",
    "3.14",
    "鲁迅",
    "原名",
    "周树人",
    "浙江",
    "绍兴",
    "人",
    "the",
    "memory",
    "fades",
    "—",
    "…",
    "「",
    "」",
    "\n",
    "machine-learning",
    "北京",
    "王府井",
    "星巴克",
    "👩‍👩‍👧",
];

fn random_text(rng: &mut SplitMix64) -> String {
    let len = rng.below(40);
    (0..len).map(|_| PIECES[rng.below(PIECES.len())]).collect()
}

#[test]
fn same_text_same_degree_same_output() {
    let text = "今天下午我和张三在北京王府井的星巴克讨论了项目进展";
    for d in [0.0, 0.1, 0.33, 0.5, 0.9, 1.0] {
        assert_eq!(mask_text(text, d).unwrap(), mask_text(text, d).unwrap());
    }
}

#[test]
fn degree_zero_and_one() {
    let text = "鲁迅原名周树人，浙江绍兴人。";
    let none = mask_text(text, 0.0).unwrap();
    assert_eq!(none.text, text);
    assert_eq!(none.masked(), 0);
    let all = mask_text(text, 1.0).unwrap();
    assert_eq!(all.masked(), all.total);
    assert!(all.total >= 4, "{all:?}");
    // Punctuation is never masked, so it survives full forgetting.
    assert!(
        all.text.contains('，') && all.text.contains('。'),
        "{}",
        all.text
    );
    assert!(!all.text.contains("鲁迅"));
    assert_eq!(all.text.matches(MASK_MARKER).count(), all.total);
}

#[test]
fn exact_counts() {
    let text = "昨天下午我们团队在会议室开了三个小时的 Sprint 回顾会议";
    let total = mask_text(text, 0.0).unwrap().total;
    assert!(total > 5);
    for i in 0..=20 {
        let d = f64::from(i) / 20.0;
        let m = mask_text(text, d).unwrap();
        let n = (d * total as f64).round() as usize;
        assert_eq!(m.masked(), n, "d={d}");
        assert_eq!(m.text.matches(MASK_MARKER).count(), n, "d={d}");
        assert_eq!(mask_count(d, total), n);
    }
}

#[test]
fn invalid_degree_is_an_error() {
    for d in [-0.01, 1.01, f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        let e = mask_text("小红放学了", d).unwrap_err();
        assert_eq!(e.kind(), "invalid_argument", "{d}");
    }
}

#[test]
fn empty_and_punctuation_only_text() {
    let e = mask_text("", 0.7).unwrap();
    assert_eq!((e.text.as_str(), e.total), ("", 0));
    let p = mask_text("，。！？  ...", 1.0).unwrap();
    assert_eq!(p.text, "，。！？  ...");
    assert_eq!(p.total, 0);
}

#[test]
fn unmasked_text_is_preserved_around_masks() {
    let text = "I wrote an HTTP server in Rust 😀";
    let m = mask_text(text, 0.5).unwrap();
    // Removing the mask words and the masked tokens' places leaves the rest in order: every
    // unmasked piece of the output occurs in the original.
    for piece in m.text.split(MASK_WORD) {
        assert!(text.contains(piece), "{piece:?} in {:?}", m.text);
    }
}

#[test]
fn property_monotone_deterministic_exact() {
    let mut rng = SplitMix64::new(0x5eed_f0e7);
    for case in 0..600 {
        let text = random_text(&mut rng);
        let (mut d1, mut d2) = (rng.next_f64(), rng.next_f64());
        if case % 10 == 0 {
            d2 = d1; // equal degrees are a pair too
        }
        if d1 > d2 {
            std::mem::swap(&mut d1, &mut d2);
        }
        let a = mask_text(&text, d1).unwrap();
        let b = mask_text(&text, d2).unwrap();
        assert_eq!(a.total, b.total);
        assert_eq!(a.masked(), mask_count(d1, a.total), "{text:?} {d1}");
        assert_eq!(b.masked(), mask_count(d2, b.total), "{text:?} {d2}");
        assert_eq!(a.text.matches(MASK_MARKER).count(), a.masked());
        for i in &a.masked_indices {
            assert!(
                b.masked_indices.contains(i),
                "case {case}: {text:?} d1={d1} d2={d2} {a:?} {b:?}"
            );
        }
        assert!(a.masked_indices.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(a, mask_text(&text, d1).unwrap(), "determinism");
    }
}
