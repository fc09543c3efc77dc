//! Text helpers of the card mapping: macro replacement, lorebook decorators and the
//! character's lines of `mes_example`.

/// What `{{user}}` / `<USER>` become: the person the character talks to has no name in a card.
pub const USER_NAME: &str = "user";

/// Prefix of a note tag that keeps one decorator line of a lorebook entry.
pub const DECORATOR_TAG: &str = "decorator:";

/// True when `text` contains a CJK ideograph (the card is written in Chinese or Japanese),
/// which picks the first-person pronoun and the wording of generated narratives.
pub fn has_han(text: &str) -> bool {
    text.chars().any(|c| {
        matches!(c, '\u{4e00}'..='\u{9fff}' | '\u{3400}'..='\u{4dbf}' | '\u{f900}'..='\u{faff}')
    })
}

/// Replaces the macros `{{char}}`/`<BOT>` by `char_name` and `{{user}}`/`<USER>` by
/// [`USER_NAME`] (ASCII case-insensitive), and trims the result. Other macros are kept.
///
/// Complexity: O(text).
pub fn replace_macros(text: &str, char_name: &str) -> String {
    let pairs: [(&str, &str); 4] = [
        ("{{char}}", char_name),
        ("<bot>", char_name),
        ("{{user}}", USER_NAME),
        ("<user>", USER_NAME),
    ];
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'{' || bytes[i] == b'<' {
            let hit = pairs.iter().find(|(pat, _)| {
                bytes
                    .get(i..i + pat.len())
                    .is_some_and(|b| b.eq_ignore_ascii_case(pat.as_bytes()))
            });
            if let Some((pat, with)) = hit {
                // Patterns are ASCII, so i and i + len are char boundaries.
                out.push_str(&text[copied..i]);
                out.push_str(with);
                i += pat.len();
                copied = i;
                continue;
            }
        }
        i += 1;
    }
    out.push_str(&text[copied..]);
    out.trim().to_owned()
}

/// Splits the decorator lines (`@@depth 4`, `@@activate`, `@@@fallback x`) off the start of a
/// lorebook entry's content: the tags that keep them (`decorator:depth=4`,
/// `decorator:activate`, `decorator:@fallback=x`) and the rest of the text, trimmed.
pub fn strip_decorators(content: &str) -> (Vec<String>, String) {
    let mut tags = Vec::new();
    let mut rest = content.trim_start();
    while let Some(line) = rest.strip_prefix("@@") {
        let (first, after) = line.split_once('\n').unwrap_or((line, ""));
        let first = first.trim();
        match first.split_once(char::is_whitespace) {
            Some((name, value)) => tags.push(format!("{DECORATOR_TAG}{name}={}", value.trim())),
            None => tags.push(format!("{DECORATOR_TAG}{first}")),
        }
        rest = after.trim_start();
    }
    (tags, rest.trim().to_owned())
}

/// The decorator lines kept in `tags` by [`strip_decorators`], in order.
pub fn decorator_lines(tags: &[String]) -> Vec<String> {
    tags.iter()
        .filter_map(|t| t.strip_prefix(DECORATOR_TAG))
        .map(|d| match d.split_once('=') {
            Some((name, value)) => format!("@@{name} {value}"),
            None => format!("@@{d}"),
        })
        .collect()
}

/// The character's utterances in `mes_example`: blocks are separated by `<START>`; a line
/// starting `{{char}}:`, `<BOT>:` or `<name>:` opens an utterance of the character, one
/// starting `{{user}}:`/`<USER>:` one of the user (dropped); other lines continue the current
/// utterance. Macros are replaced; empty utterances are dropped.
///
/// Complexity: O(text).
pub fn example_lines(mes_example: &str, char_name: &str) -> Vec<String> {
    let char_prefixes = [
        "{{char}}:".to_owned(),
        "<bot>:".to_owned(),
        format!("{char_name}:"),
    ];
    let user_prefixes = ["{{user}}:", "<user>:"];
    let mut out = Vec::new();
    for block in split_ci(mes_example, "<start>") {
        let mut current: Option<String> = None;
        for line in block.lines() {
            let trimmed = line.trim_start();
            if let Some(rest) = char_prefixes
                .iter()
                .find_map(|p| strip_prefix_ci(trimmed, p))
            {
                flush(&mut current, &mut out, char_name);
                current = Some(rest.to_owned());
            } else if user_prefixes
                .iter()
                .any(|p| strip_prefix_ci(trimmed, p).is_some())
            {
                flush(&mut current, &mut out, char_name);
            } else if let Some(text) = current.as_mut() {
                text.push('\n');
                text.push_str(line);
            }
        }
        flush(&mut current, &mut out, char_name);
    }
    out
}

fn flush(current: &mut Option<String>, out: &mut Vec<String>, char_name: &str) {
    if let Some(text) = current.take() {
        let text = replace_macros(&text, char_name);
        if !text.is_empty() {
            out.push(text);
        }
    }
}

fn strip_prefix_ci<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    let head = text.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &text[prefix.len()..])
}

/// Splits `text` on `sep` (ASCII case-insensitive; `sep` is ASCII).
fn split_ci<'a>(text: &'a str, sep: &str) -> Vec<&'a str> {
    let lower = text.to_ascii_lowercase();
    let mut parts = Vec::new();
    let mut start = 0;
    // `to_ascii_lowercase` keeps byte offsets, so positions in `lower` are positions in `text`.
    while let Some(pos) = lower[start..].find(sep) {
        parts.push(&text[start..start + pos]);
        start += pos + sep.len();
    }
    parts.push(&text[start..]);
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macros_are_replaced_case_insensitively() {
        assert_eq!(
            replace_macros(" {{Char}} greets {{user}} and <BOT> ", "Ann"),
            "Ann greets user and Ann"
        );
        assert_eq!(replace_macros("{{random:a,b}}", "Ann"), "{{random:a,b}}");
    }

    #[test]
    fn decorators_round_trip_through_tags() {
        let (tags, rest) =
            strip_decorators("@@depth 4\n@@activate\n@@@dont_activate x y\nBody\n@@not");
        assert_eq!(
            tags,
            [
                "decorator:depth=4",
                "decorator:activate",
                "decorator:@dont_activate=x y"
            ]
        );
        assert_eq!(rest, "Body\n@@not");
        let text = format!("{}\n{rest}", decorator_lines(&tags).join("\n"));
        assert_eq!(strip_decorators(&text), (tags, rest));
    }

    #[test]
    fn examples_keep_only_the_characters_lines() {
        let ex = "<START>\n{{user}}: hi\n{{char}}: Hello!\nStill me.\n{{user}}: bye\n<start>\nAnn: Bye, {{user}}.";
        assert_eq!(
            example_lines(ex, "Ann"),
            ["Hello!\nStill me.", "Bye, user."]
        );
    }
}
