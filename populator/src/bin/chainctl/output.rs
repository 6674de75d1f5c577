//! Tables for people and the mapping of failures to exit codes.

use chainstore_client::ClientError;
use chainstore_model::api::ErrorBody;
use serde_json::{json, Value};

/// Prints rows under headers, columns padded to their widest cell.
pub fn print_table(headers: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let line = |cells: Vec<String>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        println!("{}", padded.join("  ").trim_end());
    };
    line(headers.iter().map(|h| h.to_uppercase()).collect());
    for row in rows {
        line(row.clone());
    }
}

/// Exit code: the cluster refused the request (it was wrong for the store's state or the
/// caller's rights); sending it again will not help.
pub const REFUSED: u8 = 1;
/// Exit code: bad arguments or input, refused before anything was sent.
pub const USAGE: u8 = 2;
/// Exit code: the cluster is unreachable or unavailable; try again.
pub const UNAVAILABLE: u8 = 3;
/// Exit code: a guarded read that cannot answer (ask the authoritative log).
pub const CANNOT_ANSWER: u8 = 4;

/// How a command failed: an exit code and, unless already printed, what happened, in words for
/// people (one line on stderr) and as a JSON error body for scripts (`--json`, on stdout).
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub message: Option<String>,
    /// The API's error body when the cluster answered with one.
    pub body: Option<ErrorBody>,
}

impl Failure {
    fn new(code: u8, message: impl Into<String>) -> Self {
        Self {
            code,
            message: Some(message.into()),
            body: None,
        }
    }

    pub fn usage(message: impl Into<String>) -> Self {
        Self::new(USAGE, message)
    }

    pub fn refused(message: impl Into<String>) -> Self {
        Self::new(REFUSED, message)
    }

    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(UNAVAILABLE, message)
    }

    /// A failure whose explanation was already printed.
    pub fn silent(code: u8) -> Self {
        Self {
            code,
            message: None,
            body: None,
        }
    }

    /// The failure as JSON: the API's error body when there is one, else
    /// `{"error": "usage" | "refused" | "unavailable", "message": ...}`; `None` when already
    /// printed.
    pub fn json(&self) -> Option<Value> {
        let message = self.message.as_ref()?;
        if let Some(body) = &self.body {
            if let Ok(value) = serde_json::to_value(body) {
                return Some(value);
            }
        }
        let error = match self.code {
            USAGE => "usage",
            UNAVAILABLE => "unavailable",
            _ => "refused",
        };
        Some(json!({ "error": error, "message": message }))
    }
}

impl From<ClientError> for Failure {
    fn from(err: ClientError) -> Self {
        let code = match &err {
            ClientError::Unavailable(_) | ClientError::Protocol(_) => UNAVAILABLE,
            _ => REFUSED,
        };
        Self {
            code,
            message: Some(err.to_string()),
            body: err.body(),
        }
    }
}
