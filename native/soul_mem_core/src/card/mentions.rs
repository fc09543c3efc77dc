//! Mention links: note A links to note B when A's text mentions one of B's names (its content
//! or an alias). One Aho–Corasick automaton over all names scans every text once, so the cost
//! is linear in the total text and name length instead of quadratic in the number of notes.
//!
//! Matching is ASCII case-insensitive and leftmost-longest; a name that starts or ends with
//! an ASCII letter or digit only matches at a word boundary (`cat` is not found in
//! `category`); one-character ASCII names are ignored. Each note gets at most
//! [`MAX_MENTIONS_PER_NOTE`] targets, in order of first mention.

use super::limits::MAX_MENTIONS_PER_NOTE;
use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};
use std::collections::HashMap;

/// One note taking part in mention detection.
pub struct MentionNote<'a> {
    /// Names others may mention it by (empty for a note that is only a source).
    pub names: Vec<&'a str>,
    /// Texts in which it may mention others.
    pub texts: Vec<&'a str>,
}

/// For each note, the indices of the notes it mentions (never itself), at most
/// [`MAX_MENTIONS_PER_NOTE`], in order of first mention.
///
/// Complexity: O(total name length + total text length + matches).
pub fn mention_targets(notes: &[MentionNote<'_>]) -> Vec<Vec<usize>> {
    let mut patterns: Vec<&str> = Vec::new();
    let mut owners: Vec<Vec<usize>> = Vec::new();
    let mut by_key: HashMap<String, usize> = HashMap::new();
    for (i, note) in notes.iter().enumerate() {
        for name in &note.names {
            let name = name.trim();
            if name.is_empty() || (name.is_ascii() && name.len() < 2) {
                continue;
            }
            let slot = *by_key.entry(name.to_ascii_lowercase()).or_insert_with(|| {
                patterns.push(name);
                owners.push(Vec::new());
                patterns.len() - 1
            });
            if owners[slot].last() != Some(&i) {
                owners[slot].push(i);
            }
        }
    }
    let mut out = vec![Vec::new(); notes.len()];
    if patterns.is_empty() {
        return out;
    }
    let automaton: AhoCorasick = match AhoCorasickBuilder::new()
        .ascii_case_insensitive(true)
        .match_kind(MatchKind::LeftmostLongest)
        .build(&patterns)
    {
        Ok(a) => a,
        // Only a pattern set beyond the automaton's size limits fails; links are optional.
        Err(_) => return out,
    };
    for (i, note) in notes.iter().enumerate() {
        let targets = &mut out[i];
        'texts: for text in &note.texts {
            for m in automaton.find_iter(*text) {
                if !at_word_boundary(text, m.start(), m.end()) {
                    continue;
                }
                for &t in &owners[m.pattern().as_usize()] {
                    if t != i && !targets.contains(&t) {
                        targets.push(t);
                        if targets.len() >= MAX_MENTIONS_PER_NOTE {
                            break 'texts;
                        }
                    }
                }
            }
        }
    }
    out
}

/// A match whose first (last) byte is an ASCII alphanumeric must not continue a word.
fn at_word_boundary(text: &str, start: usize, end: usize) -> bool {
    let bytes = text.as_bytes();
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let left_ok = start == 0 || !word(bytes[start]) || !word(bytes[start - 1]);
    let right_ok = end >= bytes.len() || !word(bytes[end - 1]) || !word(bytes[end]);
    left_ok && right_ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_mentions_at_word_boundaries_once_each() {
        let notes = [
            MentionNote {
                names: vec!["Cat", "猫"],
                texts: vec!["a cat"],
            },
            MentionNote {
                names: vec!["Dog"],
                texts: vec!["The CAT and the cat; a category; 猫。"],
            },
            MentionNote {
                names: vec![],
                texts: vec!["dog and cat"],
            },
        ];
        assert_eq!(mention_targets(&notes), vec![vec![], vec![0], vec![1, 0]]);
    }
}
