//! TLS to PostgreSQL: a `tokio-postgres` connector over rustls (the project's only TLS stack),
//! checking the server's certificate against a CA file and the connection string's host.
//!
//! [`PgTls::None`] connects in plaintext (`sslmode=disable`, whatever the connection string
//! says): loopback, a Unix socket, a private network. [`PgTls::Verified`] requires TLS
//! (`sslmode=require`, so a server that declines it is refused rather than used in plaintext)
//! and checks the certificate's chain and name.

use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use chainstore_transport::tls::{client_config, ServerCheck};
use chainstore_transport::TlsClientOptions;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::config::SslMode;
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect};
use tokio_postgres::{Client, Config, Connection, Socket};

use chainstore_client::LogError;

/// The PostgreSQL connection's flags (shared by the populator and chainctl).
#[derive(Debug, Clone, Default, PartialEq, Eq, clap::Args)]
pub struct PgTlsArgs {
    /// Connect to PostgreSQL over TLS, checking its certificate against this CA (PEM) and the
    /// connection string's host. Without it the connection is plaintext.
    #[arg(long, env = "CHAINSTORE_PG_CA_FILE")]
    pub pg_ca_file: Option<PathBuf>,
}

impl PgTlsArgs {
    /// The TLS these flags ask for.
    pub fn tls(&self) -> Result<PgTls, String> {
        match &self.pg_ca_file {
            None => Ok(PgTls::None),
            Some(path) => PgTls::from_ca_file(path),
        }
    }
}

/// How to reach PostgreSQL.
#[derive(Clone, Default)]
pub enum PgTls {
    /// Plaintext.
    #[default]
    None,
    /// TLS, the server's certificate checked by this configuration.
    Verified(Arc<rustls::ClientConfig>),
}

impl std::fmt::Debug for PgTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PgTls::None => "PgTls::None",
            PgTls::Verified(_) => "PgTls::Verified",
        })
    }
}

impl PgTls {
    /// TLS checked against the CA certificates in `path` (PEM).
    pub fn from_ca_file(path: &Path) -> Result<Self, String> {
        let pem =
            std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let options = TlsClientOptions {
            roots_pem: Some(pem),
            identity: None,
        };
        let config = client_config(&options, ServerCheck::Hostname)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(PgTls::Verified(Arc::new(config)))
    }
}

/// The stream of a connection made with [`connect`].
pub type PgConnection = Connection<Socket, TlsStream>;

/// Opens one connection to `dsn` as `tls` says. The caller drives the returned connection.
pub async fn connect(dsn: &str, tls: &PgTls) -> Result<(Client, PgConnection), LogError> {
    let mut config: Config = dsn
        .parse()
        .map_err(|e| LogError::Invalid(format!("the connection string: {e}")))?;
    let connector = match tls {
        PgTls::None => {
            config.ssl_mode(SslMode::Disable);
            MakeRustls(None)
        }
        PgTls::Verified(client) => {
            config.ssl_mode(SslMode::Require);
            MakeRustls(Some(Arc::clone(client)))
        }
    };
    config
        .connect(connector)
        .await
        .map_err(|e| LogError::Unavailable(chainstore_transport::error_chain(&e)))
}

/// Makes a [`RustlsConnect`] per connection, named for the host it connects to.
#[derive(Clone)]
struct MakeRustls(Option<Arc<rustls::ClientConfig>>);

impl MakeTlsConnect<Socket> for MakeRustls {
    type Stream = TlsStream;
    type TlsConnect = RustlsConnect;
    type Error = io::Error;

    /// Called for every host before connecting, TLS or not: a plaintext connection never
    /// uses what it makes.
    fn make_tls_connect(&mut self, domain: &str) -> io::Result<RustlsConnect> {
        let name = ServerName::try_from(domain.to_owned())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        Ok(RustlsConnect {
            config: self.0.clone(),
            name,
        })
    }
}

/// One TLS handshake with a PostgreSQL server.
struct RustlsConnect {
    config: Option<Arc<rustls::ClientConfig>>,
    name: ServerName<'static>,
}

impl TlsConnect<Socket> for RustlsConnect {
    type Stream = TlsStream;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<TlsStream>> + Send>>;

    fn connect(self, stream: Socket) -> Self::Future {
        Box::pin(async move {
            let config = self.config.ok_or_else(|| {
                io::Error::new(io::ErrorKind::Unsupported, "TLS was not configured")
            })?;
            let connector = tokio_rustls::TlsConnector::from(config);
            Ok(TlsStream(connector.connect(self.name, stream).await?))
        })
    }
}

/// A TLS connection to PostgreSQL.
pub struct TlsStream(tokio_rustls::client::TlsStream<Socket>);

impl AsyncRead for TlsStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for TlsStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

impl tokio_postgres::tls::TlsStream for TlsStream {
    fn channel_binding(&self) -> ChannelBinding {
        ChannelBinding::none()
    }
}
