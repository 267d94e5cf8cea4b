//! Enums written as text: each variant's text given once, and `as_str`, `ALL`, `from_text`,
//! `Display` and serde (as that text) derived from it, so that a response, a log field and a
//! stored record cannot spell a variant two ways.

/// Declares an enum whose every variant is written as one fixed text (`Variant = "text"`), with
/// `as_str`, `ALL` (declaration order), `from_text`, `Display`, `Serialize` and `Deserialize` (an
/// unknown text is serde's `unknown variant` error naming the expected ones). The enum is `Copy`.
#[macro_export]
macro_rules! text_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $text:literal ),+ $(,)?
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
                match self { $( $name::$variant => $text ),+ }
            }

            /// The variant written as `text`.
            pub fn from_text(text: &str) -> Option<Self> {
                match text { $( $text => Some($name::$variant), )+ _ => None }
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
                let text = <::std::string::String as ::serde::Deserialize>::deserialize(d)?;
                Self::from_text(&text).ok_or_else(|| {
                    <D::Error as ::serde::de::Error>::unknown_variant(&text, &[$( $text ),+])
                })
            }
        }
    };
}

#[cfg(test)]
mod tests {
    crate::text_enum! {
        /// A test enum.
        #[derive(Debug, PartialEq, Eq)]
        enum Colour {
            Red = "red",
            /// Documented variants keep their docs.
            DarkBlue = "dark-blue",
        }
    }

    #[test]
    fn each_variant_is_written_and_read_as_its_one_text() {
        assert_eq!(Colour::ALL, &[Colour::Red, Colour::DarkBlue]);
        for c in Colour::ALL {
            assert_eq!(Colour::from_text(c.as_str()), Some(*c));
            assert_eq!(c.to_string(), c.as_str());
            let json = serde_json::to_string(c).unwrap();
            assert_eq!(json, format!("\"{}\"", c.as_str()));
            assert_eq!(serde_json::from_str::<Colour>(&json).unwrap(), *c);
        }
        let e = serde_json::from_str::<Colour>("\"green\"").unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown variant `green`, expected `red` or `dark-blue`"
        );
    }
}
