//! The node's TLS: one certificate and key (served to clients and peers, and presented to peers
//! as a client certificate) and one CA bundle (that peers' and clients' certificates must chain
//! to), read from files and swapped in without a restart.
//!
//! [`NodeTls::reload`] reads the three files, builds both the server configuration and the peer
//! transport's material, and swaps them only when everything checks out: the key matches the
//! certificate, the CA bundle parses, and the certificate names THIS node. A half-written
//! rotation (a new certificate beside the old key) is refused and the old material stays in
//! service until the next attempt. [`NodeTls::watch`] reloads on SIGHUP and whenever the files'
//! contents change. New connections get the new material; connections already open keep theirs.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use chainstore_transport::tls::{provider, roots_from_pem};
use chainstore_transport::{
    certificate_identity, Identity, KeyPair, PeerTransport, TlsClientOptions,
};
use raft_store::raft::NodeId;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};
use tokio_rustls::TlsAcceptor;

/// Where the node's TLS material lives.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// The node's certificate chain (PEM), its own certificate first.
    pub cert: PathBuf,
    /// The certificate's private key (PEM).
    pub key: PathBuf,
    /// The CA certificates (PEM) client and peer certificates must chain to.
    pub client_ca: PathBuf,
}

/// The contents of the three files, as last loaded.
#[derive(PartialEq, Eq)]
struct Contents {
    cert: Vec<u8>,
    key: Vec<u8>,
    client_ca: Vec<u8>,
}

impl TlsFiles {
    fn read(&self) -> Result<Contents, String> {
        let read = |path: &PathBuf| {
            std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
        };
        Ok(Contents {
            cert: read(&self.cert)?,
            key: read(&self.key)?,
            client_ca: read(&self.client_ca)?,
        })
    }
}

/// Material built from one [`Contents`].
struct Material {
    server: Arc<rustls::ServerConfig>,
    peer: TlsClientOptions,
    not_after_unix: Option<i64>,
}

fn build(node_id: NodeId, contents: &Contents) -> Result<Material, String> {
    let pair = KeyPair::from_pem(&contents.cert, &contents.key).map_err(|e| e.to_string())?;
    let own = certificate_identity(&pair.chain[0]);
    if own.identity != Some(Identity::Node(node_id)) {
        return Err(format!(
            "the certificate must name this node (chainstore://node/{node_id}); it has {}",
            own.description
        ));
    }
    let roots = roots_from_pem("the client CA", &contents.client_ca).map_err(|e| e.to_string())?;
    let provider = provider();
    // A client certificate is optional at the TLS layer (token clients and probes have none);
    // which routes a caller reaches is decided per request, by api::auth.
    let verifier =
        WebPkiClientVerifier::builder_with_provider(Arc::new(roots), Arc::clone(&provider))
            .allow_unauthenticated()
            .build()
            .map_err(|e| format!("the client CA: {e}"))?;
    let mut server = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_client_cert_verifier(Arc::new(LoggingVerifier { inner: verifier }))
        .with_single_cert(pair.chain.clone(), pair.key.clone_key())
        .map_err(|e| format!("the certificate and key: {e}"))?;
    server.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Material {
        server: Arc::new(server),
        peer: TlsClientOptions {
            roots_pem: Some(contents.client_ca.clone()),
            identity: Some(pair),
        },
        not_after_unix: own.not_after_unix,
    })
}

/// The outcome of one reload, for metrics and logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reloaded {
    /// New material is in service.
    Changed {
        /// When the new certificate expires (seconds since the epoch).
        not_after_unix: Option<i64>,
    },
    /// The files hold what is already in service.
    Unchanged,
}

/// A node's live TLS state.
pub struct NodeTls {
    node_id: NodeId,
    files: TlsFiles,
    server: RwLock<Arc<rustls::ServerConfig>>,
    peers: Arc<PeerTransport>,
    loaded: Mutex<Contents>,
    not_after_unix: Mutex<Option<i64>>,
}

impl NodeTls {
    /// Loads the material once; an error here stops the node from starting.
    pub fn load(
        node_id: NodeId,
        files: TlsFiles,
        connect_timeout: Duration,
        peer_response_bytes_max: usize,
    ) -> Result<Arc<Self>, String> {
        let contents = files.read()?;
        let material = build(node_id, &contents)?;
        let peers = PeerTransport::new(material.peer, connect_timeout, peer_response_bytes_max)
            .map_err(|e| e.to_string())?;
        Ok(Arc::new(Self {
            node_id,
            files,
            server: RwLock::new(material.server),
            peers: Arc::new(peers),
            loaded: Mutex::new(contents),
            not_after_unix: Mutex::new(material.not_after_unix),
        }))
    }

    /// The transport to the node's peers (mutual TLS with the current material).
    pub fn peer_transport(&self) -> Arc<PeerTransport> {
        Arc::clone(&self.peers)
    }

    /// An acceptor with the material in service now.
    pub fn acceptor(&self) -> TlsAcceptor {
        let config = self.server.read().unwrap_or_else(|p| p.into_inner());
        TlsAcceptor::from(Arc::clone(&config))
    }

    /// When the certificate in service expires (seconds since the epoch).
    pub fn not_after_unix(&self) -> Option<i64> {
        *self
            .not_after_unix
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Re-reads the files and swaps in their material if it differs and checks out.
    pub fn reload(&self) -> Result<Reloaded, String> {
        let contents = self.files.read()?;
        let mut loaded = self.loaded.lock().unwrap_or_else(|p| p.into_inner());
        if *loaded == contents {
            return Ok(Reloaded::Unchanged);
        }
        let material = build(self.node_id, &contents)?;
        self.peers
            .reload(material.peer)
            .map_err(|e| e.to_string())?;
        *self.server.write().unwrap_or_else(|p| p.into_inner()) = material.server;
        *self
            .not_after_unix
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = material.not_after_unix;
        *loaded = contents;
        Ok(Reloaded::Changed {
            not_after_unix: material.not_after_unix,
        })
    }

    /// Reloads on SIGHUP and every `poll` (a reload that finds the same contents does nothing),
    /// reporting each attempt that changed something or failed to `report`. Runs forever.
    pub async fn watch(
        self: Arc<Self>,
        poll: Duration,
        report: impl Fn(&Result<Reloaded, String>) + Send + 'static,
    ) {
        #[cfg(unix)]
        let mut hangup =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
        let mut ticks = tokio::time::interval(poll);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let by_signal;
            #[cfg(unix)]
            {
                let hup = async {
                    match hangup.as_mut() {
                        Some(signal) => signal.recv().await,
                        None => std::future::pending().await,
                    }
                };
                by_signal = tokio::select! {
                    _ = ticks.tick() => false,
                    _ = hup => true,
                };
            }
            #[cfg(not(unix))]
            {
                ticks.tick().await;
                by_signal = false;
            }
            let outcome = self.reload();
            match &outcome {
                Ok(Reloaded::Unchanged) => {
                    if by_signal {
                        tracing::info!("SIGHUP: the TLS files hold the material in service");
                    }
                    continue;
                }
                Ok(Reloaded::Changed { not_after_unix }) => tracing::info!(
                    cert = %self.files.cert.display(),
                    not_after_unix,
                    by_signal,
                    "TLS material reloaded"
                ),
                Err(err) => tracing::error!(
                    %err,
                    "TLS material not reloaded; the previous material stays in service"
                ),
            }
            report(&outcome);
        }
    }
}

/// The CA check of client certificates, logging every certificate it refuses with the identity
/// it claims (unverified: that is the point of the log line) so an operator can tell a node of
/// another cluster from a stale certificate.
#[derive(Debug)]
struct LoggingVerifier {
    inner: Arc<dyn ClientCertVerifier>,
}

impl ClientCertVerifier for LoggingVerifier {
    fn offer_client_auth(&self) -> bool {
        self.inner.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.inner.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.inner
            .verify_client_cert(end_entity, intermediates, now)
            .inspect_err(|err| {
                let claimed = certificate_identity(end_entity);
                let identity = claimed
                    .identity
                    .map_or_else(|| "no chainstore identity".to_string(), |i| i.to_string());
                tracing::warn!(
                    claimed = %identity,
                    certificate = %claimed.description,
                    %err,
                    "refused a client certificate"
                );
            })
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}
