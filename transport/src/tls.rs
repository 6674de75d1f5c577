//! TLS for the client side of every exchange: rustls with the ring provider, PEM material, and
//! the two ways a server is checked.
//!
//! - [`ServerCheck::Hostname`]: the usual web check, the server's certificate chains to the
//!   roots and names the host of the URL. Clients of the API use it.
//! - [`ServerCheck::Node`]: the certificate chains to the cluster's CA and names the node id the
//!   caller meant to reach (see [`crate::identity`]); the host name is not consulted. Nodes use
//!   it for each other, so a learner address that points elsewhere gets nothing from the leader:
//!   no host can answer for node 4 without a certificate the cluster's CA issued for node 4.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::verify_server_cert_signed_by_trust_anchor;
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};

use crate::identity::{certificate_identity, Identity};

/// Why TLS material could not be used.
#[derive(Debug, Clone, thiserror::Error)]
pub enum TlsError {
    /// A PEM file holds no certificate, no key, or bytes that are not PEM.
    #[error("{what}: {message}")]
    Pem {
        /// Which material.
        what: &'static str,
        /// What is wrong with it.
        message: String,
    },
    /// rustls refused the material (a key that does not match its certificate, a CA that does
    /// not parse, ...).
    #[error("{0}")]
    Rustls(String),
}

/// The crypto provider every TLS configuration here uses.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Certificates from PEM bytes; at least one.
pub fn certificates_from_pem(
    what: &'static str,
    pem: &[u8],
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Pem {
            what,
            message: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(TlsError::Pem {
            what,
            message: "no certificate in it".into(),
        });
    }
    Ok(certs)
}

/// The private key from PEM bytes (PKCS#8, PKCS#1 or SEC1).
pub fn private_key_from_pem(
    what: &'static str,
    pem: &[u8],
) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_slice(pem).map_err(|e| TlsError::Pem {
        what,
        message: e.to_string(),
    })
}

/// A root store of the CA certificates in `pem`.
pub fn roots_from_pem(what: &'static str, pem: &[u8]) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in certificates_from_pem(what, pem)? {
        roots.add(cert).map_err(|e| TlsError::Pem {
            what,
            message: e.to_string(),
        })?;
    }
    Ok(roots)
}

/// A certificate chain and its key, for presenting as a client (or server) certificate.
#[derive(Clone)]
pub struct KeyPair {
    /// The chain, the holder's certificate first.
    pub chain: Vec<CertificateDer<'static>>,
    /// Its private key.
    pub key: Arc<PrivateKeyDer<'static>>,
}

impl std::fmt::Debug for KeyPair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("KeyPair")
            .field("chain_len", &self.chain.len())
            .finish_non_exhaustive()
    }
}

impl KeyPair {
    /// Reads a chain and a key from PEM bytes.
    pub fn from_pem(cert_pem: &[u8], key_pem: &[u8]) -> Result<Self, TlsError> {
        Ok(Self {
            chain: certificates_from_pem("certificate", cert_pem)?,
            key: Arc::new(private_key_from_pem("private key", key_pem)?),
        })
    }
}

/// What a client trusts and presents.
#[derive(Debug, Clone, Default)]
pub struct TlsClientOptions {
    /// The CA certificates (PEM) servers must chain to; `None`: the system's trust store.
    pub roots_pem: Option<Vec<u8>>,
    /// The client certificate to present, if any.
    pub identity: Option<KeyPair>,
}

/// How a client checks the server it reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerCheck {
    /// Chains to the roots and names the URL's host.
    Hostname,
    /// Chains to the roots and names this node id.
    Node(u64),
}

/// A rustls client configuration for `options`, checking servers by `check`.
pub fn client_config(
    options: &TlsClientOptions,
    check: ServerCheck,
) -> Result<rustls::ClientConfig, TlsError> {
    let provider = provider();
    let builder = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Rustls(e.to_string()))?;
    let verifier: Arc<dyn ServerCertVerifier> = match (&options.roots_pem, check) {
        (Some(pem), ServerCheck::Node(node)) => Arc::new(NodeVerifier {
            roots: Arc::new(roots_from_pem("CA certificates", pem)?),
            node,
            provider: Arc::clone(&provider),
        }),
        (None, ServerCheck::Node(_)) => {
            return Err(TlsError::Rustls(
                "checking a node's certificate needs the cluster's CA".into(),
            ))
        }
        (Some(pem), ServerCheck::Hostname) => {
            rustls::client::WebPkiServerVerifier::builder_with_provider(
                Arc::new(roots_from_pem("CA certificates", pem)?),
                Arc::clone(&provider),
            )
            .build()
            .map_err(|e| TlsError::Rustls(e.to_string()))?
        }
        (None, ServerCheck::Hostname) => Arc::new(
            rustls_platform_verifier::Verifier::new(Arc::clone(&provider))
                .map_err(|e| TlsError::Rustls(e.to_string()))?,
        ),
    };
    let builder = builder
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let mut config = match &options.identity {
        Some(pair) => builder
            .with_client_auth_cert(pair.chain.clone(), pair.key.clone_key())
            .map_err(|e| TlsError::Rustls(e.to_string()))?,
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// The identity check [`ServerCheck::Node`] adds to the chain check.
#[derive(Debug, thiserror::Error)]
#[error("the server's certificate names {claimed}, not node {expected}")]
struct WrongNode {
    expected: u64,
    claimed: String,
}

/// Verifies a peer node: chain to the cluster's CA (with the server-auth usage), then the node
/// id the certificate names. Signatures are checked as rustls's own verifier checks them.
#[derive(Debug)]
struct NodeVerifier {
    roots: Arc<RootCertStore>,
    node: u64,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for NodeVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let parsed = ParsedCertificate::try_from(end_entity)?;
        verify_server_cert_signed_by_trust_anchor(
            &parsed,
            &self.roots,
            intermediates,
            now,
            self.provider.signature_verification_algorithms.all,
        )?;
        let named = certificate_identity(end_entity);
        if named.identity == Some(Identity::Node(self.node)) {
            return Ok(ServerCertVerified::assertion());
        }
        let claimed = match named.identity {
            Some(identity) => identity.to_string(),
            None => format!("no chainstore identity ({})", named.description),
        };
        Err(rustls::Error::InvalidCertificate(CertificateError::Other(
            rustls::OtherError(Arc::new(WrongNode {
                expected: self.node,
                claimed,
            })),
        )))
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}
