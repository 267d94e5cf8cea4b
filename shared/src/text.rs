//! Enums written as text: each variant's text given once (or derived from its name), and
//! `as_str`, `ALL`, `from_text`, `Display` and serde (as that text) derived from it, so that a
//! response, a log field and a stored record cannot spell a variant two ways.

/// Declares an enum whose every variant is written as one fixed text: its name in kebab case
/// (`ReplayFailed` is `replay-failed`), or the text given (`Number = "num"`). Derives `as_str`,
/// `ALL` (declaration order), `from_text`, `Display`, `Serialize` and `Deserialize` (an unknown
/// text is serde's `unknown variant` error naming the expected ones). The enum is `Copy`.
#[macro_export]
macro_rules! text_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident $(= $text:literal)? ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy)]
        $vis enum $name { $( $(#[$vmeta])* $variant ),+ }

        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: &'static [$name] = &[$( $name::$variant ),+];

            /// The text this variant is written as.
            pub fn as_str(self) -> &'static str {
                match self { $( $name::$variant => $crate::variant_text!($variant $(= $text)?) ),+ }
            }

            /// The variant written as `text`.
            pub fn from_text(text: &str) -> Option<Self> {
                Self::ALL.iter().copied().find(|v| v.as_str() == text)
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl ::serde::Serialize for $name {
            fn serialize<S: ::serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> ::serde::Deserialize<'de> for $name {
            fn deserialize<D: ::serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                const EXPECTED: &[&str] = &[$( $crate::variant_text!($variant $(= $text)?) ),+];
                let text = <::std::string::String as ::serde::Deserialize>::deserialize(d)?;
                Self::from_text(&text).ok_or_else(|| {
                    <D::Error as ::serde::de::Error>::unknown_variant(&text, EXPECTED)
                })
            }
        }
    };
}

/// The text of one [`text_enum!`] variant, computed at compile time.
#[doc(hidden)]
#[macro_export]
macro_rules! variant_text {
    ($variant:ident = $text:literal) => {
        $text
    };
    ($variant:ident) => {{
        const NAME: &str = stringify!($variant);
        const BYTES: [u8; $crate::text::kebab_len(NAME)] = $crate::text::kebab(NAME);
        const TEXT: &str = $crate::text::utf8(&BYTES);
        TEXT
    }};
}

/// The length of `name` in kebab case: one `-` before each upper-case letter but the first.
#[doc(hidden)]
pub const fn kebab_len(name: &str) -> usize {
    let bytes = name.as_bytes();
    let mut len = bytes.len();
    let mut i = 1;
    while i < bytes.len() {
        if bytes[i].is_ascii_uppercase() {
            len += 1;
        }
        i += 1;
    }
    len
}

/// `name` (an identifier in camel case) in kebab case, `N` bytes long ([`kebab_len`]).
#[doc(hidden)]
pub const fn kebab<const N: usize>(name: &str) -> [u8; N] {
    let bytes = name.as_bytes();
    let mut out = [0u8; N];
    let (mut i, mut j) = (0, 0);
    while i < bytes.len() {
        if i > 0 && bytes[i].is_ascii_uppercase() {
            out[j] = b'-';
            j += 1;
        }
        out[j] = bytes[i].to_ascii_lowercase();
        i += 1;
        j += 1;
    }
    out
}

#[doc(hidden)]
pub const fn utf8(bytes: &'static [u8]) -> &'static str {
    match std::str::from_utf8(bytes) {
        Ok(text) => text,
        Err(_) => panic!("a variant's name is ASCII"),
    }
}

#[cfg(test)]
mod tests {
    crate::text_enum! {
        /// A test enum.
        #[derive(Debug, PartialEq, Eq)]
        enum Colour {
            Red,
            /// Documented variants keep their docs.
            DarkBlue,
            Grey = "gray",
        }
    }

    #[test]
    fn each_variant_is_written_and_read_as_its_one_text() {
        assert_eq!(Colour::ALL, &[Colour::Red, Colour::DarkBlue, Colour::Grey]);
        let texts: Vec<_> = Colour::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(texts, ["red", "dark-blue", "gray"]);
        for c in Colour::ALL {
            assert_eq!(Colour::from_text(c.as_str()), Some(*c));
            assert_eq!(c.to_string(), c.as_str());
            let json = serde_json::to_string(c).unwrap();
            assert_eq!(json, format!("\"{}\"", c.as_str()));
            assert_eq!(serde_json::from_str::<Colour>(&json).unwrap(), *c);
        }
        assert_eq!(Colour::from_text("grey"), None);
        let e = serde_json::from_str::<Colour>("\"green\"").unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown variant `green`, expected one of `red`, `dark-blue`, `gray`"
        );
    }
}
