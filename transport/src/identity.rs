//! Who a certificate says its holder is.
//!
//! A chainstore certificate names exactly one identity, as a URI subject alternative name:
//! - `chainstore://node/<id>`: cluster member `<id>` (a node certificate, used both to serve
//!   and, as a client certificate, to call its peers);
//! - `chainstore://role/<read|write|admin>`: a client holding that role.
//!
//! A node certificate without such a URI may name its node in the subject's common name instead,
//! `chainstore-node-<id>`. A certificate that names no identity, or more than one, names none:
//! whoever holds it gets no access beyond the public routes.

use std::fmt;

use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate};

/// The URI prefix of a node identity.
pub const NODE_URI_PREFIX: &str = "chainstore://node/";
/// The URI prefix of a client role.
pub const ROLE_URI_PREFIX: &str = "chainstore://role/";
/// The common-name prefix of a node identity, for certificates without the URI.
pub const NODE_CN_PREFIX: &str = "chainstore-node-";

/// What a client credential allows. Each role includes the ones before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// Reads: chains, state, events, the change feed, cluster status, metrics.
    Read,
    /// Reads, appends and populates.
    Write,
    /// Everything a client can do: also membership, init, backups and `/replicated`.
    Admin,
}

impl Role {
    /// Every role, weakest first.
    pub const ALL: [Role; 3] = [Role::Read, Role::Write, Role::Admin];

    /// The role's name in token files and certificates.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Read => "read",
            Role::Write => "write",
            Role::Admin => "admin",
        }
    }

    /// The role named `name`.
    pub fn parse(name: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|role| role.as_str() == name)
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The identity a certificate names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Identity {
    /// A cluster member.
    Node(u64),
    /// A client with a role.
    Client(Role),
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Identity::Node(id) => write!(f, "node {id}"),
            Identity::Client(role) => write!(f, "{role} client"),
        }
    }
}

impl Identity {
    /// The URI subject alternative name that names this identity.
    pub fn uri(&self) -> String {
        match self {
            Identity::Node(id) => format!("{NODE_URI_PREFIX}{id}"),
            Identity::Client(role) => format!("{ROLE_URI_PREFIX}{role}"),
        }
    }
}

/// What a certificate says about its holder: its identity, if it names exactly one, and a
/// description for logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertificateIdentity {
    /// The one identity named, or `None`.
    pub identity: Option<Identity>,
    /// The subject and the URIs, as a person reads them in a log line.
    pub description: String,
    /// The end of the certificate's validity, in seconds since the Unix epoch.
    pub not_after_unix: Option<i64>,
}

fn node_id(text: &str) -> Option<u64> {
    // Digits only: "+3" or " 3" must not parse as node 3.
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok().filter(|id| *id > 0)
}

fn identity_of_uri(uri: &str) -> Option<Identity> {
    if let Some(id) = uri.strip_prefix(NODE_URI_PREFIX) {
        return node_id(id).map(Identity::Node);
    }
    uri.strip_prefix(ROLE_URI_PREFIX)
        .and_then(Role::parse)
        .map(Identity::Client)
}

/// Reads the identity from a DER certificate. A certificate that does not parse names nobody.
pub fn certificate_identity(der: &[u8]) -> CertificateIdentity {
    let Ok((_, cert)) = X509Certificate::from_der(der) else {
        return CertificateIdentity {
            identity: None,
            description: "an unparseable certificate".into(),
            not_after_unix: None,
        };
    };
    let uris: Vec<&str> = cert
        .subject_alternative_name()
        .ok()
        .flatten()
        .map(|san| {
            san.value
                .general_names
                .iter()
                .filter_map(|name| match name {
                    GeneralName::URI(uri) => Some(*uri),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default();
    let ours: Vec<&str> = uris
        .iter()
        .copied()
        .filter(|u| u.starts_with("chainstore://"))
        .collect();
    let common_name = cert
        .subject()
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .map(str::to_string);
    let identity = match ours.as_slice() {
        [one] => identity_of_uri(one),
        [] => common_name
            .as_deref()
            .and_then(|cn| cn.strip_prefix(NODE_CN_PREFIX))
            .and_then(node_id)
            .map(Identity::Node),
        _ => None,
    };
    let mut description = format!("subject \"{}\"", cert.subject());
    if !uris.is_empty() {
        description.push_str(&format!(", URIs {uris:?}"));
    }
    CertificateIdentity {
        identity,
        description,
        not_after_unix: Some(cert.validity().not_after.timestamp()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities_are_read_from_their_uris_only_when_exact() {
        assert_eq!(
            identity_of_uri("chainstore://node/3"),
            Some(Identity::Node(3))
        );
        assert_eq!(
            identity_of_uri("chainstore://role/admin"),
            Some(Identity::Client(Role::Admin))
        );
        for bad in [
            "chainstore://node/0",
            "chainstore://node/",
            "chainstore://node/+3",
            "chainstore://node/3/x",
            "chainstore://role/root",
            "chainstore://role/Admin",
            "https://node/3",
        ] {
            assert_eq!(identity_of_uri(bad), None, "{bad}");
        }
    }

    #[test]
    fn roles_are_ordered_weakest_first() {
        assert!(Role::Read < Role::Write && Role::Write < Role::Admin);
        for role in Role::ALL {
            assert_eq!(Role::parse(role.as_str()), Some(role));
        }
    }
}
