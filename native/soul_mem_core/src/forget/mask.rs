//! Masking: deterministic, monotone masking of a note's words (a prefix of one fixed
//! shuffle per text, so a higher degree masks a superset).

use super::*;
use crate::error::{Error, Result};
use crate::rng::SplitMix64;
use serde::Serialize;

/// A masked text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MaskResult {
    /// The text with the chosen words replaced by [`MASK_WORD`].
    pub text: String,
    /// Indices (into the maskable-token list, ascending) of the masked tokens.
    pub masked_indices: Vec<usize>,
    /// Number of maskable tokens (`total` of `n = round(md × total)`).
    pub total: usize,
}

impl MaskResult {
    /// Number of masked tokens.
    pub fn masked(&self) -> usize {
        self.masked_indices.len()
    }
}

/// FNV-1a, 64 bit: a stable hash (unlike `DefaultHasher`, fixed across Rust versions), so the
/// same text masks the same words on every machine and release.
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Punctuation carries no memory: masking "，" would spend the forgetting budget on nothing.
pub(super) fn is_punct(c: char) -> bool {
    c.is_ascii_punctuation()
        || ('\u{2000}'..='\u{206F}').contains(&c) // general punctuation
        || ('\u{3000}'..='\u{303F}').contains(&c) // CJK symbols and punctuation
        || ('\u{FF01}'..='\u{FF0F}').contains(&c)
        || ('\u{FF1A}'..='\u{FF20}').contains(&c)
        || ('\u{FF3B}'..='\u{FF40}').contains(&c)
        || ('\u{FF5B}'..='\u{FF65}').contains(&c)
}

/// A token can be masked when it is not whitespace and not only punctuation (words, numbers,
/// names, emoji).
fn maskable(token: &str) -> bool {
    token.chars().any(|c| !c.is_whitespace() && !is_punct(c))
}

/// Maskable tokens of `text` with their byte ranges, in order.
fn maskable_spans(text: &str) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut cursor = 0;
    for tok in crate::text::tokens(text) {
        // jieba yields the text's pieces in order; only whitespace is skipped between them, so
        // the next occurrence from the cursor is this token.
        let Some(off) = text.get(cursor..).and_then(|rest| rest.find(tok)) else {
            continue;
        };
        let start = cursor + off;
        let end = start + tok.len();
        cursor = end;
        if maskable(tok) {
            spans.push((start, end));
        }
    }
    spans
}

/// The forgetting order of `count` tokens of `text`: a permutation of `0..count` keyed only by
/// the text, so every degree masks a prefix of the same order (monotone forgetting).
fn forgetting_order(text: &str, count: usize) -> Vec<usize> {
    let seed = fnv1a(text.as_bytes());
    let mut order: Vec<usize> = (0..count).collect();
    // Sort by a hash of (text, index) — the first SplitMix64 output seeded with both, a
    // well-mixed key: a deterministic shuffle; ties (astronomically rare) fall back to the
    // index so the order is total.
    order.sort_by_key(|&i| {
        let key = SplitMix64::new(seed ^ (i as u64).wrapping_mul(0x9e37_79b9)).next_u64();
        (key, i)
    });
    order
}

/// Number of tokens to mask: `round(md × total)` (at most `total`).
pub fn mask_count(missing_degree: f64, total: usize) -> usize {
    ((missing_degree * total as f64).round() as usize).min(total)
}

/// Masks `text` to `missing_degree`: jieba segments it (HMM on), `n = round(md × total)` of its
/// maskable tokens (not whitespace, not pure punctuation) become [`MASK_WORD`].
///
/// Deterministic: same text and degree, same output. Monotone: the masked positions at a
/// higher degree include those at a lower one. Errors when `missing_degree` is not a finite
/// number in [0, 1].
///
/// Complexity: O(chars + t log t) for `t` tokens.
pub fn mask_text(text: &str, missing_degree: f64) -> Result<MaskResult> {
    if !(missing_degree.is_finite() && (0.0..=1.0).contains(&missing_degree)) {
        return Err(Error::invalid_argument(
            "missing_degree",
            format!("must be a finite number in [0, 1], got {missing_degree}"),
        ));
    }
    let spans = maskable_spans(text);
    let total = spans.len();
    let n = mask_count(missing_degree, total);
    let mut masked_indices: Vec<usize> =
        forgetting_order(text, total).into_iter().take(n).collect();
    masked_indices.sort_unstable();
    let mut out = String::with_capacity(text.len() + n * MASK_WORD.len());
    let mut cursor = 0;
    for &i in &masked_indices {
        let (s, e) = spans[i];
        out.push_str(&text[cursor..s]);
        out.push_str(MASK_WORD);
        cursor = e;
    }
    out.push_str(&text[cursor..]);
    Ok(MaskResult {
        text: out,
        masked_indices,
        total,
    })
}
