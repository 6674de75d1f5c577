//! Validated identifiers.
//!
//! Every id that names an execution or an event is 1–128 bytes of `[A-Za-z0-9._:-]`. The
//! alphabet is what makes the key encoding unambiguous: `/` never occurs inside an id, so it can
//! separate an id from what follows it in a key (see `chain::keys`). Validation happens when an id
//! is constructed or deserialized, so nothing unvalidated can reach storage.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Longest id accepted, in bytes.
pub const ID_BYTES_MAX: usize = 128;

/// Why a string is not a valid id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidId {
    /// The id is the empty string.
    #[error("id is empty")]
    Empty,
    /// The id is longer than [`ID_BYTES_MAX`] bytes.
    #[error("id is {len} bytes long, the limit is {ID_BYTES_MAX}")]
    TooLong {
        /// Length of the rejected id in bytes.
        len: usize,
    },
    /// The id holds a byte outside `[A-Za-z0-9._:-]`.
    #[error("id holds the byte 0x{byte:02x} at offset {offset}; allowed are A-Z a-z 0-9 . _ : -")]
    BadByte {
        /// The first offending byte.
        byte: u8,
        /// Its offset in the id.
        offset: usize,
    },
}

/// Checks the id rules of SPEC §2 on raw bytes.
pub fn validate_id(bytes: &[u8]) -> Result<(), InvalidId> {
    if bytes.is_empty() {
        return Err(InvalidId::Empty);
    }
    if bytes.len() > ID_BYTES_MAX {
        return Err(InvalidId::TooLong { len: bytes.len() });
    }
    match bytes.iter().position(|b| !is_id_byte(*b)) {
        Some(offset) => Err(InvalidId::BadByte {
            byte: bytes[offset],
            offset,
        }),
        None => Ok(()),
    }
}

/// The id alphabet as a regular expression (for the API's JSON Schemas): what `validate_id`
/// accepts.
pub const ID_PATTERN: &str = "^[A-Za-z0-9._:-]+$";

fn is_id_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-')
}

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(String);

        impl $name {
            /// Validates `s` and wraps it.
            pub fn new(s: impl Into<String>) -> Result<Self, InvalidId> {
                let s = s.into();
                validate_id(s.as_bytes())?;
                Ok(Self(s))
            }

            /// Validates raw bytes (as read back from storage) and wraps them.
            pub fn from_bytes(bytes: &[u8]) -> Result<Self, InvalidId> {
                validate_id(bytes)?;
                // The alphabet is ASCII, so validated bytes are valid UTF-8.
                Ok(Self(bytes.iter().map(|b| char::from(*b)).collect()))
            }

            /// The id as a string slice.
            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// The id as bytes, as it appears inside keys.
            pub fn as_bytes(&self) -> &[u8] {
                self.0.as_bytes()
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{:?}", self.0)
            }
        }

        impl std::str::FromStr for $name {
            type Err = InvalidId;
            fn from_str(s: &str) -> Result<Self, InvalidId> {
                Self::new(s)
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(&self.0)
            }
        }

        impl schemars::JsonSchema for $name {
            fn schema_name() -> std::borrow::Cow<'static, str> {
                stringify!($name).into()
            }

            fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
                schemars::json_schema!({
                    "type": "string",
                    "minLength": 1,
                    "maxLength": ID_BYTES_MAX,
                    "pattern": ID_PATTERN,
                })
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let s = String::deserialize(deserializer)?;
                Self::new(s).map_err(serde::de::Error::custom)
            }
        }
    };
}

id_type!(
    /// Names one workflow execution: the partition key of the store.
    ExecutionId
);
id_type!(
    /// Names one event, unique within its execution.
    EventId
);
id_type!(
    /// Names one populate session: a log sent in several parts (see `PopulateSession`).
    SessionId
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_whole_alphabet_and_the_length_limit() {
        assert!(ExecutionId::new("Az09._:-").is_ok());
        assert!(EventId::new("x".repeat(ID_BYTES_MAX)).is_ok());
    }

    #[test]
    fn rejects_empty_long_and_foreign_bytes() {
        assert_eq!(EventId::new(""), Err(InvalidId::Empty));
        assert_eq!(
            EventId::new("x".repeat(ID_BYTES_MAX + 1)),
            Err(InvalidId::TooLong { len: 129 })
        );
        assert_eq!(
            EventId::new("a/b"),
            Err(InvalidId::BadByte {
                byte: b'/',
                offset: 1
            })
        );
        assert_eq!(
            EventId::new("a b"),
            Err(InvalidId::BadByte {
                byte: b' ',
                offset: 1
            })
        );
        assert!(EventId::new("é").is_err());
        assert!(EventId::from_bytes(&[b'a', 0xff]).is_err());
    }

    #[test]
    fn deserialization_validates() {
        assert!(serde_json::from_str::<ExecutionId>("\"ok-1\"").is_ok());
        assert!(serde_json::from_str::<ExecutionId>("\"no way\"").is_err());
        assert!(serde_json::from_str::<ExecutionId>("17").is_err());
    }
}
