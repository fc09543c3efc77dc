//! [`HashEmbedder`]: a deterministic lexical [`TextEmbedder`] (feature hashing of character
//! n-grams), with no model and no I/O; the stand-in for the sentence-embedding model of
//! `embed/` in tests, benchmarks and as a fallback. Its vectors are never cached (the
//! embedding cache, `embedding_cache.rs`, is for the model only).

use super::dot::l2_normalise;
use super::text_embedder::{EmbedKind, TextEmbedder};
use crate::error::{Error, Result};

/// A deterministic lexical embedder: feature hashing of character 1-, 2- and 3-grams.
///
/// Text is lower-cased; whitespace and punctuation split it into runs whose boundaries are
/// marked so that n-grams do not bridge words. Each n-gram is hashed (FNV-1a 64) to a bucket
/// and a sign, weighted 0.5 / 1.0 / 1.0 by length, summed and L2-normalised. Cosine similarity
/// then approximates overlap of character n-grams, which works for Chinese (where single
/// characters carry meaning) as well as for alphabetic scripts. No model, no I/O: meant for
/// tests, benchmarks and as a lexical fallback. Complexity: O(text length) per text.
#[derive(Debug, Clone, Copy)]
pub struct HashEmbedder {
    dim: usize,
}

impl HashEmbedder {
    /// An embedder with `dim` buckets; errors when `dim` is 0.
    pub fn new(dim: usize) -> Result<Self> {
        if dim == 0 {
            return Err(Error::invalid_argument("dim", "must be at least 1"));
        }
        Ok(HashEmbedder { dim })
    }

    /// The vector of one text.
    pub fn embed_one(&self, text: &str) -> Vec<f32> {
        let mut v = vec![0f32; self.dim];
        let lower = text.to_lowercase();
        for run in lower
            .split(|c: char| c.is_whitespace() || c.is_ascii_punctuation() || is_cjk_punct(c))
            .filter(|r| !r.is_empty())
        {
            // '\u{2}' / '\u{3}' mark the run boundaries.
            let chars: Vec<char> = std::iter::once('\u{2}')
                .chain(run.chars())
                .chain(std::iter::once('\u{3}'))
                .collect();
            for n in 1..=3usize {
                let weight = if n == 1 { 0.5 } else { 1.0 };
                for w in chars.windows(n) {
                    if n == 1 && (w[0] == '\u{2}' || w[0] == '\u{3}') {
                        continue;
                    }
                    let h = fnv1a(w);
                    let bucket = (h % self.dim as u64) as usize;
                    let sign = if (h >> 63) == 0 { 1.0 } else { -1.0 };
                    v[bucket] += sign * weight;
                }
            }
        }
        l2_normalise(&mut v);
        v
    }
}

fn is_cjk_punct(c: char) -> bool {
    matches!(
        c,
        '，' | '。'
            | '、'
            | '；'
            | '：'
            | '？'
            | '！'
            | '“'
            | '”'
            | '‘'
            | '’'
            | '（'
            | '）'
            | '《'
            | '》'
            | '「'
            | '」'
            | '…'
            | '—'
            | '·'
    )
}

fn fnv1a(chars: &[char]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for c in chars {
        for b in (*c as u32).to_le_bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    // Final avalanche so bucket (low bits) and sign (high bit) are independent.
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h
}

impl TextEmbedder for HashEmbedder {
    fn dim(&self) -> usize {
        self.dim
    }

    fn embed(&self, texts: &[&str], _kind: EmbedKind) -> Result<Vec<Vec<f32>>> {
        Ok(texts.iter().map(|t| self.embed_one(t)).collect())
    }
}
