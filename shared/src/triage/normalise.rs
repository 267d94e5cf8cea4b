//! The versioned normaliser: variable text (ids, numbers, addresses, times, quoted values)
//! replaced by a placeholder naming its kind, so that two failures that differ only in such
//! values read as one template.
//!
//! A version, once shipped, never changes what it produces: a group id names the version it
//! was computed with, and an id stored by an older build is resolved by running that version
//! again. A change of behaviour is a new version.

use serde::Serialize;

/// The version new group ids are computed with.
pub const CURRENT: Version = Version::V2;

/// Templates are cut to this many characters (the recorded message is at most 256).
const MAX_TEMPLATE_CHARS: usize = 512;
/// A quoted value longer than this is not one value: its quotes are left as text.
const MAX_QUOTED_CHARS: usize = 128;

/// A normaliser version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Version {
    /// UUIDs (and SQS message ids), ARNs, 12-digit account ids, IPv4 and IPv6 addresses,
    /// emails, dates, times and timestamps, hex (0x-prefixed, or 8+ hex digits mixing digits
    /// and letters), numbers, quoted values.
    V1,
    /// V1, and URLs (scheme to the end of the address) and durations (`1500ms`, `30s`, `2.5h`).
    V2,
}

impl Version {
    pub const ALL: [Version; 2] = [Version::V1, Version::V2];

    pub fn number(self) -> u32 {
        match self {
            Self::V1 => 1,
            Self::V2 => 2,
        }
    }

    pub fn from_number(n: u32) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.number() == n)
    }

    fn masks_urls_and_durations(self) -> bool {
        self >= Self::V2
    }
}

crate::text_enum! {
    /// What a placeholder stands for; written (and serialised) as the placeholder's name.
    #[derive(Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
    pub enum Kind {
        Uuid,
        Arn,
        Url,
        Account,
        Ip,
        Email,
        Timestamp,
        Date,
        Hex,
        Number = "num",
        Duration,
        Quoted,
    }
}

/// One value the normaliser took out of the text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Masked {
    pub kind: Kind,
    pub value: String,
}

/// A text normalised: the template (placeholders `<kind>`) and the values masked, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Normalised {
    pub template: String,
    pub masked: Vec<Masked>,
}

/// Normalises `text` with `version`. Whitespace runs become one space; the template is cut to
/// 512 characters.
pub fn normalise(text: &str, version: Version) -> Normalised {
    let bytes = text.as_bytes();
    let mut template = String::with_capacity(text.len());
    let mut masked = Vec::new();
    let mut i = 0;
    let mut last_space = true;
    while i < bytes.len() {
        let b = bytes[i];
        if b.is_ascii_whitespace() {
            if !last_space {
                template.push(' ');
                last_space = true;
            }
            i += 1;
            continue;
        }
        last_space = false;
        let at_word_start = i == 0 || !is_word(bytes[i - 1]);
        if at_word_start && let Some((kind, len)) = match_at(text, i, version) {
            template.push('<');
            template.push_str(kind.as_str());
            template.push('>');
            masked.push(Masked {
                kind,
                value: text[i..i + len].to_string(),
            });
            i += len;
            continue;
        }
        // Copy one character (or a whole word, so that no match starts inside it).
        let ch_len = utf8_len(b);
        let end = if is_word(b) {
            let mut j = i;
            while j < bytes.len() && is_word(bytes[j]) {
                j += 1;
            }
            j
        } else {
            (i + ch_len).min(bytes.len())
        };
        template.push_str(&text[i..end]);
        i = end;
    }
    let template = template.trim_end().to_string();
    let template = if template.chars().count() > MAX_TEMPLATE_CHARS {
        template.chars().take(MAX_TEMPLATE_CHARS).collect()
    } else {
        template
    };
    Normalised { template, masked }
}

fn utf8_len(first: u8) -> usize {
    match first {
        0x00..=0x7f => 1,
        0xc0..=0xdf => 2,
        0xe0..=0xef => 3,
        _ => 4,
    }
}

/// Letters, digits and `_`: a match must start and end at the edge of such a run.
fn is_word(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b >= 0x80
}

/// The longest-standing kind matching at `i` (a word start), and the length of its text.
fn match_at(text: &str, i: usize, version: Version) -> Option<(Kind, usize)> {
    let s = &text.as_bytes()[i..];
    let first = s[0];
    if first == b'\'' || first == b'"' || first == b'`' {
        return quoted(s).map(|n| (Kind::Quoted, n));
    }
    if s.starts_with(b"arn:") {
        return Some((Kind::Arn, until_delimiter(s)));
    }
    if version.masks_urls_and_durations()
        && (s.starts_with(b"https://") || s.starts_with(b"http://"))
    {
        return Some((Kind::Url, until_delimiter(s)));
    }
    if !first.is_ascii_alphanumeric() {
        return None;
    }
    if let Some(n) = email(s) {
        return Some((Kind::Email, n));
    }
    if let Some((kind, n)) = date_time(s) {
        return Some((kind, n));
    }
    if let Some(n) = uuid(s) {
        return Some((Kind::Uuid, n));
    }
    if let Some(n) = ipv4(s).or_else(|| ipv6(s)) {
        return Some((Kind::Ip, n));
    }
    if let Some(n) = hex(s) {
        return Some((Kind::Hex, n));
    }
    number(s, version)
}

fn ends_word(s: &[u8], n: usize) -> bool {
    n == s.len() || !is_word(s[n])
}

fn run(s: &[u8], from: usize, pred: impl Fn(u8) -> bool) -> usize {
    s[from..].iter().take_while(|&&b| pred(b)).count()
}

fn quoted(s: &[u8]) -> Option<usize> {
    let quote = s[0];
    let close = s[1..]
        .iter()
        .take(MAX_QUOTED_CHARS + 1)
        .position(|&b| b == quote || b == b'\n')?;
    (s[1 + close] == quote).then_some(close + 2)
}

/// An ARN or URL runs to whitespace, a quote or a closing bracket; a trailing `.`, `,` or `:`
/// is punctuation of the sentence.
fn until_delimiter(s: &[u8]) -> usize {
    let mut n = run(s, 0, |b| {
        !b.is_ascii_whitespace()
            && !matches!(
                b,
                b'"' | b'\'' | b'`' | b')' | b']' | b'}' | b'>' | b',' | b';'
            )
    });
    while n > 0 && matches!(s[n - 1], b'.' | b':') {
        n -= 1;
    }
    n
}

fn email(s: &[u8]) -> Option<usize> {
    let local = run(s, 0, |b| {
        b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'%' | b'+' | b'-')
    });
    if local == 0 || s.get(local) != Some(&b'@') {
        return None;
    }
    let domain = run(s, local + 1, |b| {
        b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-')
    });
    let mut end = local + 1 + domain;
    while end > local + 1 && s[end - 1] == b'.' {
        end -= 1;
    }
    let domain = &s[local + 1..end];
    let dot = domain.iter().rposition(|&b| b == b'.')?;
    let tld = &domain[dot + 1..];
    (dot > 0 && tld.len() >= 2 && tld.iter().all(u8::is_ascii_alphabetic)).then_some(end)
}

fn digits(s: &[u8], from: usize, n: usize) -> bool {
    s.len() >= from + n && s[from..from + n].iter().all(u8::is_ascii_digit)
}

/// `YYYY-MM-DD`, optionally with a time (`T` or space, `HH:MM[:SS[.fff]]`, `Z` or an offset);
/// or a time alone (`HH:MM:SS[.fff]`).
fn date_time(s: &[u8]) -> Option<(Kind, usize)> {
    if digits(s, 0, 4)
        && s.get(4) == Some(&b'-')
        && digits(s, 5, 2)
        && s.get(7) == Some(&b'-')
        && digits(s, 8, 2)
    {
        let date_end = 10;
        if matches!(s.get(10), Some(b'T') | Some(b' '))
            && let Some(t) = time(s, 11)
        {
            let mut end = t;
            if s.get(end) == Some(&b'Z') {
                end += 1;
            } else if matches!(s.get(end), Some(b'+') | Some(b'-')) && digits(s, end + 1, 2) {
                end += 3;
                if s.get(end) == Some(&b':') && digits(s, end + 1, 2) {
                    end += 3;
                } else if digits(s, end, 2) {
                    end += 2;
                }
            }
            if ends_word(s, end) {
                return Some((Kind::Timestamp, end));
            }
        }
        return ends_word(s, date_end).then_some((Kind::Date, date_end));
    }
    let t = time(s, 0)?;
    // A time alone needs its seconds: `10:30` is too often something else.
    (t >= 8 && ends_word(s, t)).then_some((Kind::Timestamp, t))
}

/// `HH:MM[:SS[.fff]]` from `from`; returns its end.
fn time(s: &[u8], from: usize) -> Option<usize> {
    if !(digits(s, from, 2) && s.get(from + 2) == Some(&b':') && digits(s, from + 3, 2)) {
        return None;
    }
    let mut end = from + 5;
    if s.get(end) == Some(&b':') && digits(s, end + 1, 2) {
        end += 3;
        if matches!(s.get(end), Some(b'.') | Some(b',')) {
            let frac = run(s, end + 1, |b| b.is_ascii_digit());
            if frac > 0 {
                end += 1 + frac;
            }
        }
    }
    Some(end)
}

fn uuid(s: &[u8]) -> Option<usize> {
    const GROUPS: [usize; 5] = [8, 4, 4, 4, 12];
    let mut at = 0;
    for (k, len) in GROUPS.into_iter().enumerate() {
        if run(s, at, |b| b.is_ascii_hexdigit()) < len {
            return None;
        }
        at += len;
        if k < 4 {
            if s.get(at) != Some(&b'-') {
                return None;
            }
            at += 1;
        }
    }
    ends_word(s, at).then_some(at)
}

/// `a.b.c.d` (each 0 to 255), with an optional `:port`.
fn ipv4(s: &[u8]) -> Option<usize> {
    let mut at = 0;
    for k in 0..4 {
        let n = run(s, at, |b| b.is_ascii_digit());
        if n == 0 || n > 3 {
            return None;
        }
        let octet: u32 = std::str::from_utf8(&s[at..at + n]).ok()?.parse().ok()?;
        if octet > 255 {
            return None;
        }
        at += n;
        if k < 3 {
            if s.get(at) != Some(&b'.') {
                return None;
            }
            at += 1;
        }
    }
    if s.get(at) == Some(&b':') {
        let port = run(s, at + 1, |b| b.is_ascii_digit());
        if (1..=5).contains(&port) && ends_word(s, at + 1 + port) {
            at += 1 + port;
        }
    }
    ends_word(s, at).then_some(at)
}

/// Hex groups of 1 to 4 digits joined by `:` (at least two colons), e.g. `fe80::1`.
fn ipv6(s: &[u8]) -> Option<usize> {
    let n = run(s, 0, |b| b.is_ascii_hexdigit() || b == b':');
    let mut n = n;
    while n > 0 && s[n - 1] == b':' && !(n >= 2 && s[n - 2] == b':') {
        n -= 1;
    }
    let text = &s[..n];
    let colons = text.iter().filter(|&&b| b == b':').count();
    let groups_ok = text.split(|&b| b == b':').all(|g| g.len() <= 4);
    let has_digit = text.iter().any(u8::is_ascii_digit);
    (colons >= 2 && groups_ok && has_digit && n >= 6 && ends_word(s, n)).then_some(n)
}

/// `0x` and hex digits, or a run of 8 or more hex digits that mixes digits and letters.
fn hex(s: &[u8]) -> Option<usize> {
    if s.len() > 2 && s[0] == b'0' && (s[1] == b'x' || s[1] == b'X') {
        let n = run(s, 2, |b| b.is_ascii_hexdigit());
        return (n > 0 && ends_word(s, 2 + n)).then_some(2 + n);
    }
    let n = run(s, 0, |b| b.is_ascii_hexdigit());
    let mixed = s[..n].iter().any(u8::is_ascii_digit) && s[..n].iter().any(u8::is_ascii_alphabetic);
    (n >= 8 && mixed && ends_word(s, n)).then_some(n)
}

/// Digits with an optional fraction: 12 digits alone are an account id; in V2 a number
/// followed by a unit of time is a duration.
fn number(s: &[u8], version: Version) -> Option<(Kind, usize)> {
    let int = run(s, 0, |b| b.is_ascii_digit());
    if int == 0 {
        return None;
    }
    let mut end = int;
    if s.get(end) == Some(&b'.') && s.get(end + 1).is_some_and(u8::is_ascii_digit) {
        end += 1 + run(s, end + 1, |b| b.is_ascii_digit());
    }
    if ends_word(s, end) {
        let kind = if int == 12 && end == 12 {
            Kind::Account
        } else {
            Kind::Number
        };
        return Some((kind, end));
    }
    if version.masks_urls_and_durations() {
        for unit in [&b"ms"[..], b"us", b"ns", b"s", b"m", b"h"] {
            if s[end..].starts_with(unit) && ends_word(s, end + unit.len()) {
                return Some((Kind::Duration, end + unit.len()));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn t(text: &str) -> String {
        normalise(text, CURRENT).template
    }

    #[test]
    fn each_kind_is_masked() {
        let cases = [
            (
                "order 5fea7756-0ea4-451a-a703-a558b933e274 failed",
                "order <uuid> failed",
            ),
            (
                "queue arn:aws:sqs:eu-west-1:123456789012:orders-dlq, gone",
                "queue <arn>, gone",
            ),
            ("account 123456789012 denied", "account <account> denied"),
            ("connect 10.0.3.17:8443 refused", "connect <ip> refused"),
            (
                "connect fe80::1ff:fe23:4567 refused",
                "connect <ip> refused",
            ),
            (
                "mail ops.team+x@example.co.uk bounced",
                "mail <email> bounced",
            ),
            (
                "at 2026-11-21T10:59:00.123Z and 2026-11-21",
                "at <timestamp> and <date>",
            ),
            (
                "at 2026-11-21 10:59:00+01:00 then 10:59:07",
                "at <timestamp> then <timestamp>",
            ),
            (
                "ptr 0xdeadBEEF digest 9f86d081884c7d65",
                "ptr <hex> digest <hex>",
            ),
            (
                "got 503 after 3 tries, 12.5 avg",
                "got <num> after <num> tries, <num> avg",
            ),
            (
                "field 'amount' expected \"number\"",
                "field <quoted> expected <quoted>",
            ),
            ("got \"\" for ''", "got <quoted> for <quoted>"),
            (
                "GET https://api.example.com/v1/orders/9?x=1 failed",
                "GET <url> failed",
            ),
            (
                "timed out after 1500ms (30s budget)",
                "timed out after <duration> (<duration> budget)",
            ),
        ];
        for (text, want) in cases {
            assert_eq!(t(text), want, "{text}");
        }
    }

    #[test]
    fn words_that_merely_contain_digits_are_kept() {
        for text in [
            "HTTP_503 from v2 api",
            "sha256 of utf8 text",
            "can't parse it",
            "base64",
        ] {
            assert_eq!(t(text), text);
        }
    }

    #[test]
    fn masked_values_are_returned_in_order() {
        let n = normalise("user 42 at 10.1.2.3 said 'hi'", CURRENT);
        let got: Vec<(Kind, &str)> = n
            .masked
            .iter()
            .map(|m| (m.kind, m.value.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                (Kind::Number, "42"),
                (Kind::Ip, "10.1.2.3"),
                (Kind::Quoted, "'hi'")
            ]
        );
    }

    #[test]
    fn v1_keeps_urls_and_durations_as_text_and_is_unchanged() {
        let text = "GET https://api.example.com/v1/orders/9 failed after 1500ms";
        assert_eq!(
            normalise(text, Version::V1).template,
            "GET https://api.example.com/v1/orders/<num> failed after 1500ms"
        );
        assert_eq!(
            normalise(text, Version::V2).template,
            "GET <url> failed after <duration>"
        );
    }

    #[test]
    fn whitespace_is_collapsed_and_long_templates_are_cut() {
        assert_eq!(t("  a \n\t b  "), "a b");
        assert_eq!(t(&"x ".repeat(1000)).chars().count(), MAX_TEMPLATE_CHARS);
    }

    proptest! {
        #[test]
        fn any_text_normalises_without_panicking(text in "\\PC{0,300}") {
            for v in Version::ALL {
                let n = normalise(&text, v);
                prop_assert!(n.template.chars().count() <= MAX_TEMPLATE_CHARS);
            }
        }

        #[test]
        fn numbers_and_uuids_never_change_the_template(a in 0u64..1_000_000_000, b in any::<u128>(), c in any::<u128>()) {
            let uuid = |n: u128| {
                let h = format!("{n:032x}");
                format!("{}-{}-{}-{}-{}", &h[..8], &h[8..12], &h[12..16], &h[16..20], &h[20..])
            };
            let one = format!("order {a} of {} failed", uuid(b));
            let two = format!("order 7 of {} failed", uuid(c));
            prop_assert_eq!(t(&one), t(&two));
        }
    }
}
