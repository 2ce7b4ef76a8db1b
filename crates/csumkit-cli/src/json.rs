//! The few JSON values the commands print with `--json` (no dependency for
//! a writer this small): strings escaped per RFC 8259, numbers, arrays and
//! objects with keys in the given order.

/// A JSON string.
pub fn string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A JSON number from an unsigned integer.
pub fn number(value: u64) -> String {
    value.to_string()
}

/// A JSON object of already-encoded values.
pub fn object(fields: &[(&str, String)]) -> String {
    let body: Vec<String> = fields.iter().map(|(k, v)| format!("{}:{v}", string(k))).collect();
    format!("{{{}}}", body.join(","))
}

/// A JSON array of already-encoded values.
pub fn array(items: &[String]) -> String {
    format!("[{}]", items.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_and_nests() {
        assert_eq!(string("a\"b\\c\nd\u{1}"), r#""a\"b\\c\nd\u0001""#);
        assert_eq!(object(&[("n", number(3)), ("s", string("x"))]), r#"{"n":3,"s":"x"}"#);
        assert_eq!(array(&[number(1), array(&[])]), "[1,[]]");
    }
}
