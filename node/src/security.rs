//! Credentials: the cluster secret, client tokens with their roles, and how peers and clients
//! authenticate. Secrets never appear in `Debug` output or in logs.
//!
//! Peers authenticate by certificate when the node serves TLS ([`PeerAuth::Certificate`]), and
//! by the shared cluster secret only on plaintext setups ([`PeerAuth::Secret`]). Clients
//! authenticate with a bearer token from the tokens file or a client certificate naming a role;
//! anonymous clients are refused unless the node was started with `--insecure-no-client-auth`.

use std::fmt;

pub use chainstore_transport::Role;

use subtle::ConstantTimeEq;

/// The shortest secret or token accepted.
pub const SECRET_BYTES_MIN: usize = 16;

/// Secrets that were published as examples (in this repository's docs and manifests, or in
/// common use) and are refused as real ones.
pub const KNOWN_EXAMPLE_SECRETS: &[&str] = &[
    "change-me-to-a-long-random-string",
    "change-me",
    "changeme",
    "demo-cluster-secret",
    "test-cluster-secret",
    "chaos-cluster-secret",
    "cluster-secret",
    "secret",
    "password",
    "token-one",
    "token-two",
];

/// A secret value: compared in constant time, never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// A secret after the checks every secret passes: long enough, printable ASCII without
    /// spaces (it travels in an HTTP header), not a published example.
    pub fn new(value: impl Into<String>) -> Result<Self, SecretError> {
        let value = value.into();
        if value.len() < SECRET_BYTES_MIN {
            return Err(SecretError::TooShort);
        }
        if !value.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(SecretError::Unprintable);
        }
        if KNOWN_EXAMPLE_SECRETS
            .iter()
            .any(|example| example.eq_ignore_ascii_case(&value))
        {
            return Err(SecretError::Example);
        }
        Ok(Self(value))
    }

    /// The value, for sending.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether `offered` is this secret, in time independent of where they differ.
    pub fn matches(&self, offered: &[u8]) -> bool {
        self.0.as_bytes().ct_eq(offered).into()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// Why a secret was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    /// Shorter than [`SECRET_BYTES_MIN`].
    #[error("it is shorter than {SECRET_BYTES_MIN} characters")]
    TooShort,
    /// Holds spaces, control characters or non-ASCII bytes.
    #[error("it must be printable ASCII without spaces")]
    Unprintable,
    /// A published example.
    #[error("it is a published example value; generate one, e.g. `openssl rand -hex 24`")]
    Example,
}

/// How peers prove they are cluster members.
#[derive(Debug, Clone)]
pub enum PeerAuth {
    /// By a certificate from the cluster's CA naming a member (mutual TLS).
    Certificate,
    /// By the shared cluster secret in `x-chainstore-secret` (plaintext test setups only).
    Secret(Secret),
}

/// Bearer tokens and the role each grants.
#[derive(Debug, Clone, Default)]
pub struct Tokens {
    entries: Vec<(Role, Secret)>,
}

impl Tokens {
    /// Parses a tokens file: one `role:token` a line; blank lines and `#` comments ignored.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut entries: Vec<(Role, Secret)> = Vec::new();
        for (number, line) in text.lines().enumerate().map(|(i, l)| (i + 1, l.trim())) {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (role, token) = line
                .split_once(':')
                .ok_or_else(|| format!("line {number}: expected role:token"))?;
            let role = Role::parse(role.trim())
                .ok_or_else(|| format!("line {number}: the role must be read, write or admin"))?;
            let token =
                Secret::new(token.trim()).map_err(|e| format!("line {number}: the token: {e}"))?;
            if entries.iter().any(|(_, known)| known == &token) {
                return Err(format!("line {number}: the token is listed twice"));
            }
            entries.push((role, token));
        }
        Ok(Self { entries })
    }

    /// Tokens from `(role, token)` pairs, checked as a file's would be.
    pub fn from_pairs<'a>(
        pairs: impl IntoIterator<Item = (Role, &'a str)>,
    ) -> Result<Self, SecretError> {
        let entries = pairs
            .into_iter()
            .map(|(role, token)| Secret::new(token).map(|t| (role, t)))
            .collect::<Result<_, _>>()?;
        Ok(Self { entries })
    }

    /// The role `offered` grants, if it is a token. Every token is compared, in constant time.
    pub fn role_of(&self, offered: &str) -> Option<Role> {
        let mut found = None;
        for (role, token) in &self.entries {
            if token.matches(offered.as_bytes()) {
                found = Some(*role);
            }
        }
        found
    }

    /// No token is configured.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// How clients authenticate.
#[derive(Debug, Clone, Default)]
pub struct ClientAuth {
    /// Bearer tokens accepted, with their roles.
    pub tokens: Tokens,
    /// Admit requests without any credential, with every role (`--insecure-no-client-auth`).
    pub insecure_no_client_auth: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_checked_and_never_printed() {
        let secret = Secret::new("a-real-secret-of-some-length").unwrap();
        assert_eq!(format!("{secret:?}"), "Secret(<redacted>)");
        assert!(secret.matches(b"a-real-secret-of-some-length"));
        assert!(!secret.matches(b"a-real-secret-of-some-lengtH"));
        assert_eq!(Secret::new("short").unwrap_err(), SecretError::TooShort);
        assert_eq!(
            Secret::new("has a space in it somewhere").unwrap_err(),
            SecretError::Unprintable
        );
        assert_eq!(
            Secret::new("CHANGE-ME-TO-A-LONG-RANDOM-STRING").unwrap_err(),
            SecretError::Example
        );
    }

    #[test]
    fn token_files_give_roles_and_refuse_bad_lines() {
        let tokens = Tokens::parse(
            "# comment\n\nread:rrrrrrrrrrrrrrrrrrrr\n write : wwwwwwwwwwwwwwwwwwww \nadmin:aaaaaaaaaaaaaaaaaaaa\n",
        )
        .unwrap();
        assert_eq!(tokens.role_of("rrrrrrrrrrrrrrrrrrrr"), Some(Role::Read));
        assert_eq!(tokens.role_of("wwwwwwwwwwwwwwwwwwww"), Some(Role::Write));
        assert_eq!(tokens.role_of("aaaaaaaaaaaaaaaaaaaa"), Some(Role::Admin));
        assert_eq!(tokens.role_of("xxxxxxxxxxxxxxxxxxxx"), None);
        assert_eq!(tokens.role_of(""), None);
        let debug = format!("{tokens:?}");
        assert!(!debug.contains("rrrr"), "{debug}");
        for bad in [
            "read",
            "root:aaaaaaaaaaaaaaaaaaaa",
            "read:short",
            "read:aaaaaaaaaaaaaaaaaaaa\nadmin:aaaaaaaaaaaaaaaaaaaa",
            "admin:token-one",
        ] {
            assert!(Tokens::parse(bad).is_err(), "{bad:?} was accepted");
        }
    }
}
