//! Semantic field alignment: mapping an LLM's free-form answer back onto a semantic note's
//! fields (content, aliases, concept type, description).

use super::*;
use crate::model::{ConceptType, SemMemory};
use std::collections::HashSet;

/// Lower-cased letters only: "Concept Type", "concept_type", "**ConceptType**" → "concepttype".
pub(super) fn key_of(s: &str) -> String {
    s.chars()
        .filter(|c| c.is_alphabetic())
        .flat_map(char::to_lowercase)
        .collect()
}

/// Splits `line` at its first ASCII or full-width colon.
pub(super) fn split_colon(line: &str) -> Option<(&str, &str)> {
    let i = line.find([':', '：'])?;
    let colon_len = line[i..].chars().next().map_or(1, char::len_utf8);
    Some((&line[..i], &line[i + colon_len..]))
}

/// Words an LLM uses to say "no change" or "nothing": such values keep the old field.
fn is_placeholder(v: &str) -> bool {
    let k: String = v
        .chars()
        .filter(|c| !c.is_whitespace() && !is_punct(*c))
        .flat_map(char::to_lowercase)
        .collect();
    matches!(
        k.as_str(),
        "" | "none"
            | "null"
            | "na"
            | "n"
            | "unchanged"
            | "same"
            | "nochange"
            | "无"
            | "无变化"
            | "不变"
            | "同上"
            | "未知"
            | "unknown"
    )
}

/// Text compared without whitespace, punctuation and case: equal means the meaning is unchanged.
fn norm(s: &str) -> String {
    s.chars()
        .filter(|c| !c.is_whitespace() && !is_punct(*c))
        .flat_map(char::to_lowercase)
        .collect()
}

pub(super) fn trim_value(v: &str) -> &str {
    v.trim()
        .trim_matches(|c: char| c == '*' || c == '`' || c == '"' || c == '“' || c == '”')
        .trim()
}

fn parse_aliases(v: &str) -> Vec<String> {
    let v = v.trim().trim_start_matches('[').trim_end_matches(']');
    let mut seen = HashSet::new();
    v.split([',', '，', '、', ';', '；', '|', '/'])
        .map(|a| {
            a.trim()
                .trim_matches(|c: char| c == '"' || c == '\'' || c == '“' || c == '”')
                .trim()
        })
        .filter(|a| !a.is_empty() && !is_placeholder(a) && !a.contains(MASK_MARKER))
        .filter(|a| seen.insert(norm(a)))
        .map(str::to_owned)
        .collect()
}

fn parse_concept_type(v: &str) -> Option<ConceptType> {
    let k = v.to_lowercase();
    let entity = k.contains("entity") || k.contains("实体");
    let abstract_ = k.contains("abstract") || k.contains("抽象");
    match (entity, abstract_) {
        (true, false) => Some(ConceptType::Entity),
        (false, true) => Some(ConceptType::Abstract),
        // Both or neither: ambiguous, keep the old type.
        _ => None,
    }
}

/// Merges an LLM's `Aliases:` / `Description:` / `ConceptType:` answer into a semantic memory.
///
/// Tolerant parsing: keys in any case, with spaces or underscores, markdown bullets or bold,
/// ASCII or full-width colons, other lines ignored; the first occurrence of a key wins.
/// Rules (the seed's, plus guards):
/// - a value equal to the old one up to case, spaces and punctuation keeps the old value, as
///   does a placeholder ("unchanged", "none", "无", …) or a value still containing `[masked]`;
/// - aliases are split on `, ， 、 ; ； | /`, de-duplicated; while `missing_degree` is below
///   0.6 (the seed's `ALIGN_LENGTH_CAP_THRESHOLD`, see [`align_sem_fields_with`] to change
///   it) a longer alias list is rejected and the old kept — a barely-forgotten memory cannot
///   gain knowledge;
/// - a description is written back only when non-empty;
/// - a concept type is written back only when it parses unambiguously (Entity/Abstract, 实体/抽象).
///
/// The content is never changed here (it is the concept's identity; see [`apply_revision`]).
pub fn align_sem_fields(old: &SemMemory, llm_output: &str, missing_degree: f64) -> SemMemory {
    align_sem_fields_with(
        old,
        llm_output,
        missing_degree,
        ForgetConfig::default().alias_growth_threshold,
    )
}

/// [`align_sem_fields`] with an explicit alias-growth threshold (e.g. from [`ForgetConfig`]).
pub fn align_sem_fields_with(
    old: &SemMemory,
    llm_output: &str,
    missing_degree: f64,
    alias_growth_threshold: f64,
) -> SemMemory {
    let mut aliases = None;
    let mut description = None;
    let mut concept = None;
    for line in llm_output.lines() {
        let Some((k, v)) = split_colon(line) else {
            continue;
        };
        match key_of(k).as_str() {
            "aliases" | "alias" if aliases.is_none() => aliases = Some(v),
            "description" if description.is_none() => description = Some(v),
            "concepttype" | "type" if concept.is_none() => concept = Some(v),
            _ => {}
        }
    }
    let mut out = old.clone();

    if let Some(v) = aliases.filter(|v| !is_placeholder(v)) {
        let new = parse_aliases(v);
        let old_norm: Vec<String> = old.aliases.iter().map(|a| norm(a)).collect();
        let new_norm: Vec<String> = new.iter().map(|a| norm(a)).collect();
        let unchanged = {
            let mut a = old_norm.clone();
            let mut b = new_norm.clone();
            a.sort();
            b.sort();
            a == b
        };
        // NaN degree counts as "low": the conservative side of the guard.
        let low = missing_degree.is_nan() || missing_degree < alias_growth_threshold;
        let grows = new.len() > old.aliases.len();
        let rejected = low && grows;
        if !new.is_empty() && !unchanged && !rejected {
            out.aliases = new;
        }
    }

    if let Some(v) = description.map(trim_value) {
        if !v.is_empty()
            && !is_placeholder(v)
            && !v.contains(MASK_MARKER)
            && norm(v) != norm(&old.description)
        {
            out.description = v.to_owned();
        }
    }

    if let Some(ct) = concept.and_then(parse_concept_type) {
        out.concept_type = ct;
    }
    out
}
