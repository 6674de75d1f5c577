//! Who may call what. Every route is built with one [`Access`] level (`api::app` is the table);
//! [`guard`] authenticates the caller once and admits or refuses the request before its body is
//! read.
//!
//! Authentication, in order: a bearer token, when the request carries `Authorization`, is the
//! credential (an unknown one is 401 whatever else the request carries); otherwise the client
//! certificate of the TLS connection (a node certificate makes the caller a peer when it names
//! a member, a role certificate makes it a client with that role); otherwise the cluster secret
//! of a plaintext cluster; otherwise the caller is anonymous.
//!
//! Authorization: peers may call every route (they forward clients' requests that they have
//! already authorized); clients need their route's role or a stronger one; anonymous callers
//! reach only the public routes, unless the node runs with `--insecure-no-client-auth`, and never
//! the Raft RPCs. A missing or unknown credential is 401, a known one without the right is 403,
//! both with the API's JSON error and before anything is read or changed.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use chainstore_transport::{CertificateIdentity, Identity, Role};

use super::error::ApiError;
use crate::host::Host;
use crate::security::PeerAuth;
use chainstore_model::api::headers::CLUSTER_SECRET;

/// What a route requires of its caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Anyone: liveness and readiness probes.
    Public,
    /// A client with at least this role, or a peer.
    Client(Role),
    /// A cluster member only: the Raft RPCs.
    Peer,
}

/// What the server knows about the connection a request arrived on; the server loop adds it to
/// every request.
#[derive(Debug, Clone, Default)]
pub struct Connection {
    /// The remote address.
    pub remote: Option<SocketAddr>,
    /// The client certificate of a TLS connection, already verified against the cluster's CA.
    pub certificate: Option<Arc<CertificateIdentity>>,
}

/// An authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Caller {
    /// No credential at all.
    Anonymous,
    /// A cluster member: `Some(id)` by its certificate, `None` by the cluster secret.
    Peer(Option<u64>),
    /// A client with a role.
    Client(Role),
}

/// Why a request was refused before it reached its handler.
enum Refusal {
    /// 401: no credential, or one this node does not know.
    Unauthenticated(String),
    /// 403: a credential this node knows, without the right.
    Forbidden(String),
}

impl From<Refusal> for ApiError {
    fn from(refusal: Refusal) -> Self {
        match refusal {
            Refusal::Unauthenticated(m) => ApiError::unauthorized(m),
            Refusal::Forbidden(m) => ApiError::forbidden(m),
        }
    }
}

fn authenticate(
    node: &Host,
    headers: &HeaderMap,
    connection: &Connection,
) -> Result<Caller, Refusal> {
    if let Some(value) = headers.get(header::AUTHORIZATION) {
        let token = value
            .to_str()
            .ok()
            .and_then(|v| v.strip_prefix("Bearer "))
            .ok_or_else(|| {
                Refusal::Unauthenticated("the Authorization header must be `Bearer <token>`".into())
            })?;
        return match node.config().client_auth.tokens.role_of(token) {
            Some(role) => Ok(Caller::Client(role)),
            None => Err(Refusal::Unauthenticated("unknown bearer token".into())),
        };
    }
    if let Some(certificate) = &connection.certificate {
        return match certificate.identity {
            Some(Identity::Node(id)) if node.accepts_peer(id) => Ok(Caller::Peer(Some(id))),
            Some(Identity::Node(id)) => Err(Refusal::Forbidden(format!(
                "node {id} is not a member of this cluster"
            ))),
            Some(Identity::Client(role)) => Ok(Caller::Client(role)),
            None => Err(Refusal::Forbidden(
                "the client certificate names no chainstore identity".into(),
            )),
        };
    }
    if let Some(offered) = headers.get(CLUSTER_SECRET) {
        return match &node.config().peer_auth {
            PeerAuth::Secret(secret) if secret.matches(offered.as_bytes()) => {
                Ok(Caller::Peer(None))
            }
            PeerAuth::Secret(_) => Err(Refusal::Unauthenticated("wrong cluster secret".into())),
            PeerAuth::Certificate => Err(Refusal::Unauthenticated(
                "this node authenticates peers by certificate, not by a secret".into(),
            )),
        };
    }
    Ok(Caller::Anonymous)
}

fn authorize(node: &Host, caller: &Caller, access: Access) -> Result<(), Refusal> {
    match (access, caller) {
        (Access::Public, _) | (_, Caller::Peer(_)) => Ok(()),
        (Access::Peer, Caller::Anonymous) => Err(Refusal::Unauthenticated(
            "raft RPCs need a cluster member's credential".into(),
        )),
        (Access::Peer, Caller::Client(_)) => Err(Refusal::Forbidden(
            "only cluster members may call raft RPCs".into(),
        )),
        (Access::Client(need), Caller::Client(role)) if *role >= need => Ok(()),
        (Access::Client(need), Caller::Client(role)) => Err(Refusal::Forbidden(format!(
            "this route needs the {need} role; the credential has {role}"
        ))),
        (Access::Client(_), Caller::Anonymous)
            if node.config().client_auth.insecure_no_client_auth =>
        {
            Ok(())
        }
        (Access::Client(_), Caller::Anonymous) => Err(Refusal::Unauthenticated(
            "a credential is required: a bearer token or a client certificate".into(),
        )),
    }
}

/// The middleware of a route with `access`: authenticates, authorizes, and only then runs it.
pub async fn guard(
    State((node, access)): State<(Arc<Host>, Access)>,
    request: Request,
    next: Next,
) -> Response {
    if access == Access::Public {
        return next.run(request).await;
    }
    let connection = request
        .extensions()
        .get::<Connection>()
        .cloned()
        .unwrap_or_default();
    let admitted = authenticate(&node, request.headers(), &connection)
        .and_then(|caller| authorize(&node, &caller, access));
    match admitted {
        Ok(()) => next.run(request).await,
        Err(refusal) => {
            log_refusal(&request, &connection, access, &refusal);
            ApiError::from(refusal).into_response()
        }
    }
}

/// Refusals on the Raft RPCs, and any by a node certificate, are an operator's business: a
/// removed node still running, a node of another cluster, or an attack. Client refusals are
/// routine and logged only at debug level.
fn log_refusal(request: &Request, connection: &Connection, access: Access, refusal: &Refusal) {
    let reason = match refusal {
        Refusal::Unauthenticated(m) | Refusal::Forbidden(m) => m.as_str(),
    };
    let peer = connection
        .certificate
        .as_ref()
        .map_or("no client certificate".to_string(), |c| match c.identity {
            Some(identity) => format!("{identity} ({})", c.description),
            None => c.description.clone(),
        });
    let remote = connection
        .remote
        .map_or_else(|| "unknown".to_string(), |r| r.to_string());
    let by_node = connection
        .certificate
        .as_ref()
        .is_some_and(|c| matches!(c.identity, Some(Identity::Node(_))));
    if access == Access::Peer || by_node {
        tracing::warn!(
            path = request.uri().path(),
            %remote,
            peer = %peer,
            reason,
            "refused a request from a would-be peer"
        );
    } else {
        tracing::debug!(path = request.uri().path(), %remote, peer = %peer, reason, "refused a request");
    }
}
