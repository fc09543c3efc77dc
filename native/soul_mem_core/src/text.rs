//! Chinese text processing with jieba: segmentation (HMM on) and TF-IDF keywords, used to turn
//! plain text into retrieval queries without an LLM (design rule: avoid the LLM where possible).

use crate::retrieval::query::{QueryVariant, SemQueryUnit, SitQueryUnit, SubQuery};
use jieba_rs::{Jieba, KeywordExtract, KeywordExtractConfig, TfIdf};
use rust_stemmers::{Algorithm, Stemmer};
use std::sync::OnceLock;

fn jieba() -> &'static Jieba {
    static JIEBA: OnceLock<Jieba> = OnceLock::new();
    JIEBA.get_or_init(Jieba::new)
}

fn tfidf() -> &'static TfIdf {
    static TFIDF: OnceLock<TfIdf> = OnceLock::new();
    TFIDF.get_or_init(|| {
        let mut t = TfIdf::default();
        // The default config segments without HMM; new names (characters' friends, places)
        // are exactly the out-of-vocabulary words HMM recovers. jieba's stop words and IDF
        // table are Chinese: an English word unknown to it gets the median IDF, so "why" and
        // "do" would tie with "seagulls" — NLTK's English stop words join its list.
        let config = stop_words::get(stop_words::LANGUAGE::English)
            .into_iter()
            .fold(KeywordExtractConfig::builder().use_hmm(true), |b, w| {
                b.add_stop_word(w)
            })
            .build();
        *t.config_mut() = config;
        t
    })
}

/// Segments `text` into words (jieba, HMM on), keeping whitespace-free tokens.
///
/// Complexity: O(chars) with jieba's DAG segmentation.
pub fn tokens(text: &str) -> Vec<&str> {
    jieba()
        .cut(text, true)
        .into_iter()
        .map(|t| t.word)
        .filter(|w| !w.trim().is_empty())
        .collect()
}

fn english() -> &'static Stemmer {
    static STEMMER: OnceLock<Stemmer> = OnceLock::new();
    STEMMER.get_or_init(|| Stemmer::create(Algorithm::English))
}

/// Search terms of `text` for the lexical (BM25) channel: jieba's search segmentation (HMM
/// on; long words also yield their dictionary sub-words, so 北极星座钟 matches 座钟), lower-cased,
/// keeping only tokens with a letter or digit (punctuation, emoji and whitespace give nothing).
/// Latin-script words come out whole (jieba keeps runs of ASCII letters and digits together)
/// and are reduced to their Snowball English stem, so "seagulls" finds a note keyed "seagull".
///
/// Complexity: O(chars).
pub fn search_terms(text: &str) -> Vec<String> {
    jieba()
        .cut_for_search(text, true)
        .into_iter()
        .map(|t| t.word)
        .filter(|w| w.chars().any(char::is_alphanumeric))
        .map(|w| {
            let w = w.to_lowercase();
            if w.bytes().all(|b| b.is_ascii_alphabetic()) {
                english().stem(&w).into_owned()
            } else {
                w
            }
        })
        .collect()
}

/// The `top_k` most informative words of `text` by TF-IDF, best first.
pub fn keywords(text: &str, top_k: usize) -> Vec<String> {
    // No part-of-speech filter: jieba's dictionary tags food and slang (麻辣烫) inconsistently;
    // the IDF weights and stop-word list already push function words down.
    let allowed = Vec::new();
    let mut out: Vec<String> = tfidf()
        .extract_keywords(jieba(), text, top_k, allowed)
        .into_iter()
        .map(|k| k.keyword)
        .collect();
    out.dedup();
    out
}

/// Default number of keyword queries made from one text.
pub const DEFAULT_KEYWORDS: usize = 4;

/// Turns plain text into seed-shaped sub-queries: the whole text as a Situation narrative query
/// (priority 2, tagged with the keywords), plus one Semantic identifier query per keyword
/// (priority 1). Empty or whitespace-only text gives no queries. Complexity: O(len) (jieba).
pub fn text_queries(text: &str, max_keywords: usize) -> Vec<SubQuery> {
    let text = text.trim();
    if text.is_empty() {
        return Vec::new();
    }
    let words = keywords(text, max_keywords);
    let mut queries = vec![SubQuery {
        priority: 2,
        tag: words.clone(),
        variant: QueryVariant::Situation(vec![SitQueryUnit {
            narrative: text.to_owned(),
            ..SitQueryUnit::default()
        }]),
    }];
    queries.extend(words.into_iter().map(|w| SubQuery {
        priority: 1,
        tag: vec![w.clone()],
        variant: QueryVariant::Semantic(vec![SemQueryUnit {
            concept_identifier: w,
            description: String::new(),
        }]),
    }));
    queries
}

/// Length (in chars) above which a text is also embedded by passages.
pub const PASSAGE_MIN_CHARS: usize = 120;
/// Most chars of one passage (sentences are grouped up to it; a longer sentence is its own).
pub const PASSAGE_MAX_CHARS: usize = 64;

/// The passages of a long text: its sentences (split after 。！？；!?; and newlines) grouped
/// in order up to [`PASSAGE_MAX_CHARS`]. Empty for a text of at most [`PASSAGE_MIN_CHARS`]
/// chars. Why: one embedding of a whole character card averages every detail away, so a
/// question about one detail (a habit, a nickname) misses it; each passage keeps its detail
/// findable while the whole text still answers the broad questions. Complexity: O(len).
pub fn passages(text: &str) -> Vec<String> {
    if text.chars().count() <= PASSAGE_MIN_CHARS {
        return Vec::new();
    }
    let mut sentences: Vec<String> = Vec::new();
    let mut cur = String::new();
    for c in text.chars() {
        if c != '\n' {
            cur.push(c);
        }
        if matches!(c, '。' | '！' | '？' | '；' | '!' | '?' | ';' | '\n') {
            let t = cur.trim();
            if !t.is_empty() {
                sentences.push(t.to_owned());
            }
            cur.clear();
        }
    }
    if !cur.trim().is_empty() {
        sentences.push(cur.trim().to_owned());
    }
    let mut out: Vec<String> = Vec::new();
    let mut group = String::new();
    for s in sentences {
        if !group.is_empty() && group.chars().count() + s.chars().count() > PASSAGE_MAX_CHARS {
            out.push(std::mem::take(&mut group));
        }
        group.push_str(&s);
    }
    if !group.is_empty() {
        out.push(group);
    }
    if out.len() < 2 {
        out.clear();
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn long_texts_split_into_sentence_passages() {
        assert!(passages("我是小红。我喜欢红茶。").is_empty());
        let card = "我是小红，住在海边的小镇上。".repeat(4)
            + "我喜欢红茶，每天下午都要喝一杯！\n"
            + &"我讨厌下雨天；下雨时我会待在家里看书。".repeat(3);
        let p = passages(&card);
        assert!(p.len() >= 3, "{p:?}");
        // Nothing lost, nothing reordered (the newline is a boundary, not content).
        assert_eq!(p.concat(), card.replace('\n', ""));
        for x in &p {
            let one_sentence = x.matches(['。', '！', '；']).count() <= 1;
            assert!(
                x.chars().count() <= PASSAGE_MAX_CHARS || one_sentence,
                "{x}"
            );
        }
        assert!(p.iter().any(|x| x.contains("红茶")));
    }

    #[test]
    fn segments_chinese_and_mixed_text() {
        let t = tokens("小红和小白放学后去吃麻辣烫");
        assert!(t.contains(&"麻辣烫"), "{t:?}");
        assert!(t.concat() == "小红和小白放学后去吃麻辣烫");
        let m = tokens("我用Rust写了 HTTP 服务器😀");
        assert!(m.contains(&"Rust"), "{m:?}");
    }

    #[test]
    fn search_terms_split_compounds_and_drop_punctuation() {
        let t = search_terms("北极星座钟，QC03 Crane！😀");
        assert!(t.iter().any(|w| w == "座钟" || w == "北极星"), "{t:?}");
        assert!(t.iter().any(|w| w == "qc03"), "{t:?}");
        assert!(t.iter().any(|w| w == "crane"), "{t:?}");
        assert!(t.iter().all(|w| w.chars().any(char::is_alphanumeric)));
        assert!(search_terms("😀…！ \n").is_empty());
    }

    #[test]
    fn english_words_are_stemmed_and_english_function_words_are_no_keywords() {
        assert_eq!(search_terms("seagulls"), search_terms("Seagull"));
        assert_eq!(search_terms("carries crumbs"), ["carri", "crumb"]);
        let k = keywords("Why do you carry crumbs for the seagulls?", 4);
        assert!(k.iter().any(|w| w == "seagulls"), "{k:?}");
        assert!(!k
            .iter()
            .any(|w| ["Why", "do", "you", "for", "the"].contains(&w.as_str())));
    }

    #[test]
    fn keywords_pick_content_words() {
        let k = keywords("昨天放学后我和小白一起去老街吃麻辣烫，她把汤打翻了", 8);
        assert!(!k.is_empty());
        assert!(k.iter().any(|w| w == "麻辣烫"), "{k:?}");
        assert!(!k.iter().any(|w| w == "的" || w == "了"));
    }

    #[test]
    fn text_queries_have_seed_shape() {
        let q = serde_json::to_value(text_queries("你还记得麻辣烫吗", 3)).unwrap();
        assert_eq!(
            q[0]["variant"]["Situation"][0]["narrative"],
            "你还记得麻辣烫吗"
        );
        assert!(q.as_array().unwrap()[1..]
            .iter()
            .all(|s| s["variant"]["Semantic"][0]["concept_identifier"].is_string()));
        assert!(text_queries("  \n", 3).is_empty());
    }
}
