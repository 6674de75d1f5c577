//! How a command-line tool reaches a cluster: node URLs, the bearer token (from a file or the
//! environment, never a flag, so it never shows in `ps`), the CA and client certificate for
//! `https://` nodes, deadlines and attempts. `chainctl` and `chainstore-populator` share these
//! flags (and their `CHAINCTL_*` environment variables).

use std::path::{Path, PathBuf};
use std::time::Duration;

use chainstore_transport::{KeyPair, TlsClientOptions};

use chainstore_client::{Client, RetryPolicy};

/// The connection flags of a tool built on [`Client`].
#[derive(Debug, Clone, clap::Args)]
pub struct ConnectArgs {
    /// Comma-separated node URLs.
    #[arg(
        long,
        env = "CHAINCTL_NODES",
        value_delimiter = ',',
        default_value = "http://127.0.0.1:7101,http://127.0.0.1:7102,http://127.0.0.1:7103"
    )]
    pub nodes: Vec<String>,
    /// A file holding the bearer token for the client API (or set CHAINCTL_TOKEN; there is no
    /// flag for the token itself, so it never shows in `ps`).
    #[arg(long, env = "CHAINCTL_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,
    /// The CA certificate(s), PEM, that `https://` nodes' certificates chain to (default: the
    /// system's trust store).
    #[arg(long, env = "CHAINCTL_CA_FILE")]
    pub ca_file: Option<PathBuf>,
    /// A client certificate (PEM) to present; it names a role (`chainstore://role/<role>`).
    #[arg(long, env = "CHAINCTL_CERT", requires = "key")]
    pub cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(long, env = "CHAINCTL_KEY", requires = "cert")]
    pub key: Option<PathBuf>,
    /// Deadline of one request, in milliseconds.
    #[arg(long, default_value_t = 5_000)]
    pub timeout_ms: u64,
    /// Attempts per call before giving up on an unavailable cluster.
    #[arg(long, default_value_t = 10)]
    pub attempts: u32,
}

/// Why the flags do not make a client: a file that cannot be read, a token given twice, a bad
/// key pair or URL. The message names the flag.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConnectError(pub String);

fn read_file(path: &Path) -> Result<Vec<u8>, ConnectError> {
    std::fs::read(path).map_err(|e| ConnectError(format!("cannot read {}: {e}", path.display())))
}

impl ConnectArgs {
    /// The bearer token: CHAINCTL_TOKEN or `--token-file`, not both.
    pub fn token(&self) -> Result<Option<String>, ConnectError> {
        let from_env = std::env::var("CHAINCTL_TOKEN")
            .ok()
            .filter(|t| !t.is_empty());
        match (from_env, &self.token_file) {
            (Some(_), Some(_)) => Err(ConnectError(
                "the token comes from CHAINCTL_TOKEN or --token-file, not both".into(),
            )),
            (Some(token), None) => Ok(Some(token)),
            (None, Some(path)) => {
                let text = String::from_utf8(read_file(path)?)
                    .map_err(|_| ConnectError(format!("{} is not text", path.display())))?;
                Ok(Some(text.trim().to_string()).filter(|t| !t.is_empty()))
            }
            (None, None) => Ok(None),
        }
    }

    /// The TLS settings: the CA to trust and the client certificate to present.
    pub fn tls(&self) -> Result<TlsClientOptions, ConnectError> {
        let roots_pem = self.ca_file.as_deref().map(read_file).transpose()?;
        let identity = match (&self.cert, &self.key) {
            (Some(cert), Some(key)) => Some(
                KeyPair::from_pem(&read_file(cert)?, &read_file(key)?)
                    .map_err(|e| ConnectError(format!("--cert/--key: {e}")))?,
            ),
            _ => None,
        };
        Ok(TlsClientOptions {
            roots_pem,
            identity,
        })
    }

    /// The retry policy the flags ask for.
    pub fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy {
            attempts_max: self.attempts.max(1),
            request_timeout: Duration::from_millis(self.timeout_ms),
            ..RetryPolicy::default()
        }
    }

    /// A client built from the flags.
    pub fn client(&self) -> Result<Client, ConnectError> {
        let mut builder = Client::builder(self.nodes.clone())
            .retry_policy(self.retry_policy())
            .tls(self.tls()?);
        if let Some(token) = self.token()? {
            builder = builder.token(token);
        }
        builder.build().map_err(|e| ConnectError(e.to_string()))
    }
}
