//! The SQS message-attribute model, independent of any SDK, and SQS's size accounting.

use std::collections::BTreeMap;

/// One message attribute as SQS stores it: a data type (`String`, `Number`, `Binary`, or a
/// custom type such as `Number.int`) and a string or binary value, kept byte for byte.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageAttribute {
    pub data_type: String,
    pub value: AttributeValue,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttributeValue {
    /// `String` and `Number` types (and their custom subtypes) carry a string value.
    String(String),
    /// `Binary` types carry raw bytes.
    Binary(Vec<u8>),
}

/// Attributes by name. Ordered, so that serialisation and size accounting are deterministic.
pub type Attributes = BTreeMap<String, MessageAttribute>;

impl MessageAttribute {
    pub fn string(value: impl Into<String>) -> Self {
        Self {
            data_type: "String".into(),
            value: AttributeValue::String(value.into()),
        }
    }

    pub fn number(value: impl Into<String>) -> Self {
        Self {
            data_type: "Number".into(),
            value: AttributeValue::String(value.into()),
        }
    }

    pub fn binary(value: impl Into<Vec<u8>>) -> Self {
        Self {
            data_type: "Binary".into(),
            value: AttributeValue::Binary(value.into()),
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match &self.value {
            AttributeValue::String(s) => Some(s),
            AttributeValue::Binary(_) => None,
        }
    }

    /// The base type of the data type: `Number.int` -> `Number`.
    pub fn base_type(&self) -> &str {
        self.data_type.split('.').next().unwrap_or("")
    }

    /// Bytes this attribute counts towards the message size: name, data type and value
    /// ("Message attributes ... count toward the message size limit", SQS developer guide).
    pub fn size_with_name(&self, name: &str) -> usize {
        let value = match &self.value {
            AttributeValue::String(s) => s.len(),
            AttributeValue::Binary(b) => b.len(),
        };
        name.len() + self.data_type.len() + value
    }
}

/// Size of a message as SQS counts it: body bytes plus every attribute's name, type and value.
pub fn message_size(body: &str, attributes: &Attributes) -> usize {
    body.len()
        + attributes
            .iter()
            .map(|(name, a)| a.size_with_name(name))
            .sum::<usize>()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_counts_body_names_types_and_values() {
        let mut attrs = Attributes::new();
        attrs.insert("tenant".into(), MessageAttribute::string("acme")); // 6 + 6 + 4
        attrs.insert("blob".into(), MessageAttribute::binary(vec![0u8, 1, 2])); // 4 + 6 + 3
        attrs.insert(
            "n".into(),
            MessageAttribute {
                data_type: "Number.int".into(),
                value: AttributeValue::String("7".into()),
            },
        ); // 1 + 10 + 1
        assert_eq!(message_size("héllo", &attrs), 6 + 16 + 13 + 12);
    }

    #[test]
    fn base_type_strips_custom_suffix() {
        let a = MessageAttribute {
            data_type: "Number.int".into(),
            value: AttributeValue::String("1".into()),
        };
        assert_eq!(a.base_type(), "Number");
        assert_eq!(MessageAttribute::binary(vec![]).base_type(), "Binary");
    }
}
