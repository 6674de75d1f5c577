//! Tables for people and the mapping of failures to exit codes.

use chainstore_client::ClientError;

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

/// How a command failed: an exit code and, unless already printed, one line for stderr.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub message: Option<String>,
}

impl Failure {
    pub fn usage(message: impl Into<String>) -> Self {
        Self {
            code: 2,
            message: Some(message.into()),
        }
    }

    pub fn refused(message: impl Into<String>) -> Self {
        Self {
            code: 1,
            message: Some(message.into()),
        }
    }

    pub fn unavailable(message: impl Into<String>) -> Self {
        Self {
            code: 3,
            message: Some(message.into()),
        }
    }

    /// A failure whose explanation was already printed.
    pub fn silent(code: u8) -> Self {
        Self {
            code,
            message: None,
        }
    }
}

impl From<ClientError> for Failure {
    fn from(err: ClientError) -> Self {
        let code = match &err {
            ClientError::Unavailable(_) | ClientError::Protocol(_) => 3,
            _ => 1,
        };
        Self {
            code,
            message: Some(err.to_string()),
        }
    }
}
