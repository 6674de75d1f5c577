//! The authoritative log as a PostgreSQL table: [`PgTable`] names it and its columns (checked
//! against the catalog once, then quoted into every query), [`PgLog`] reads it — one execution's
//! events for [`LogSource`], the rows past a position for the populator, a sample of executions
//! for the comparator — over a few connections that reconnect when PostgreSQL restarts.
//!
//! The populator only reads: the role it connects as needs `SELECT` on the table and nothing
//! else (its checkpoint is a local file).
//!
//! ## The order column
//! The populator follows the table by an integer column that grows with every insert (a
//! `bigserial` or `bigint generated always as identity`), assigned by the inserting statement.
//! Such a value is fixed before the row commits, so rows may become visible out of order: a
//! transaction holding 41 can commit after one holding 42 was read. [`PgLog::poll`] therefore
//! returns, with the rows, the snapshot's transaction horizon (`pg_current_snapshot()`), and the
//! populator only moves its durable checkpoint past a position once every transaction that was
//! running when the position was read has ended; until then it re-counts the rows below it and
//! populates any that arrived late. A time stamped when the event was made is no such column:
//! clocks of different writers disagree, and a row stamped earlier may commit much later.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use chainstore_model::{EventId, ExecutionId, LogEvent};
use tokio::sync::Mutex;
use tokio_postgres::{Client as PgClient, Row};

pub use crate::postgres_tls::{connect, PgConnection, PgTls, PgTlsArgs};
use chainstore_client::{BoxFuture, LogError, LogSource};

/// The table and the columns that hold the log (also the command-line flags that name them).
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct TableNames {
    /// The table (or schema.table).
    #[arg(long, env = "CHAINSTORE_POPULATOR_TABLE", default_value = "events")]
    pub table: String,
    /// The execution id column.
    #[arg(
        id = "execution_column",
        long = "execution-column",
        default_value = "execution_id"
    )]
    pub execution: String,
    /// The event id column.
    #[arg(id = "event_column", long = "event-column", default_value = "event_id")]
    pub event: String,
    /// The previous event id column (null at an execution's root).
    #[arg(
        id = "prev_column",
        long = "prev-column",
        default_value = "prev_event_id"
    )]
    pub prev: String,
    /// The log's order: an integer assigned by the inserting statement, a bigserial or an
    /// identity (module docs).
    #[arg(id = "order_column", long = "order-column", default_value = "id")]
    pub order: String,
    /// The payload column (json, jsonb or text holding JSON).
    #[arg(
        id = "payload_column",
        long = "payload-column",
        default_value = "payload"
    )]
    pub payload: String,
    /// The parent execution id column, if the table has one.
    #[arg(id = "parent_column", long = "parent-column")]
    pub parent: Option<String>,
}

/// A column or table name quoted for SQL. A name is letters, digits and `_`, not starting with
/// a digit, at most 63 bytes (PostgreSQL's limit); anything else is refused rather than escaped.
fn quote_ident(name: &str) -> Result<String, String> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && !name.as_bytes()[0].is_ascii_digit()
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if ok {
        Ok(format!("\"{name}\""))
    } else {
        Err(format!(
            "{name:?} is not a plain SQL name (letters, digits and _, at most 63 bytes)"
        ))
    }
}

/// The table's queries, with every name checked and quoted.
#[derive(Debug, Clone)]
pub struct PgTable {
    names: TableNames,
    table: String,
    execution: String,
    order: String,
    /// `SELECT` list of one event: event, prev, parent, payload as text.
    event_columns: String,
}

impl PgTable {
    /// Checks and quotes the names (the catalog is asked later, by [`PgLog::connect`]).
    pub fn new(names: TableNames) -> Result<Self, String> {
        let table = names
            .table
            .split('.')
            .map(quote_ident)
            .collect::<Result<Vec<_>, _>>()?;
        if table.len() > 2 {
            return Err(format!("{:?}: at most schema.table", names.table));
        }
        let column = |c: &str| quote_ident(c).map(|q| format!("{q}::text"));
        let parent = match &names.parent {
            Some(p) => column(p)?,
            None => "NULL::text".into(),
        };
        let event_columns = format!(
            "{}, {}, {}, {}",
            column(&names.event)?,
            column(&names.prev)?,
            parent,
            column(&names.payload)?
        );
        Ok(Self {
            table: table.join("."),
            execution: quote_ident(&names.execution)?,
            order: quote_ident(&names.order)?,
            event_columns,
            names,
        })
    }
}

/// One row past a position: its order value and its execution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowRef {
    /// The order column's value.
    pub order: i64,
    /// The execution column's value, as text.
    pub execution: String,
}

/// What one poll of the table saw, all in one snapshot.
#[derive(Debug, Clone, Default)]
pub struct Poll {
    /// The snapshot's oldest running transaction (every older one has ended).
    pub xmin: u64,
    /// The first transaction id not yet assigned when the snapshot was taken.
    pub xmax: u64,
    /// Rows at or below the cursor counted above `floor`: when this differs from what the
    /// caller has seen there, [`PgLog::window`] lists them.
    pub window_rows: u64,
    /// Rows past the cursor, in order, at most the limit asked for.
    pub rows: Vec<RowRef>,
    /// The largest order value in the table (the log's position, for lag).
    pub log_position: Option<i64>,
}

/// A few connections to the database holding the log.
pub struct PgLog {
    dsn: String,
    tls: PgTls,
    table: PgTable,
    /// `$1` cast to the execution column's own type, so its index serves the lookup.
    execution_param: String,
    slots: Vec<Mutex<Option<Arc<PgClient>>>>,
    next: AtomicUsize,
}

fn unavailable(e: tokio_postgres::Error) -> LogError {
    LogError::Unavailable(chainstore_transport::error_chain(&e))
}

async fn open(dsn: &str, tls: &PgTls) -> Result<PgClient, LogError> {
    let (client, connection) = connect(dsn, tls).await?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::warn!(error = %e, "PostgreSQL connection ended");
        }
    });
    Ok(client)
}

impl PgLog {
    /// Connects (`connections` at most, opened as needed), checks that the table and every
    /// named column exist, and learns the execution column's type.
    pub async fn connect(
        dsn: &str,
        tls: PgTls,
        table: PgTable,
        connections: usize,
    ) -> Result<Self, LogError> {
        let client = open(dsn, &tls).await?;
        let regclass = client
            .query_one("SELECT to_regclass($1)::oid::int8", &[&table.table])
            .await
            .map_err(unavailable)?
            .get::<_, Option<i64>>(0)
            .ok_or_else(|| LogError::Invalid(format!("no table {}", table.names.table)))?;
        let names = &table.names;
        let mut types = Vec::new();
        for column in [
            Some(&names.execution),
            Some(&names.event),
            Some(&names.prev),
            Some(&names.order),
            Some(&names.payload),
            names.parent.as_ref(),
        ]
        .into_iter()
        .flatten()
        {
            let row = client
                .query_opt(
                    "SELECT format_type(atttypid, atttypmod) FROM pg_attribute \
                     WHERE attrelid = $1::int8::oid AND attname = $2 AND NOT attisdropped",
                    &[&regclass, column],
                )
                .await
                .map_err(unavailable)?;
            let Some(row) = row else {
                return Err(LogError::Invalid(format!(
                    "table {} has no column {column:?}",
                    names.table
                )));
            };
            types.push(row.get::<_, String>(0));
        }
        let order_type = &types[3];
        if !matches!(order_type.as_str(), "bigint" | "integer" | "smallint") {
            return Err(LogError::Invalid(format!(
                "the order column {:?} is {order_type}; it must be an integer assigned on insert \
                 (bigserial or identity)",
                names.order
            )));
        }
        let execution_param = format!("$1::text::{}", types[0]);
        let slots = (0..connections.max(1))
            .map(|_| Mutex::new(None))
            .collect::<Vec<_>>();
        *slots[0].lock().await = Some(Arc::new(client));
        Ok(Self {
            dsn: dsn.to_string(),
            tls,
            table,
            execution_param,
            slots,
            next: AtomicUsize::new(0),
        })
    }

    /// A live connection, opened again when the last one closed.
    async fn conn(&self) -> Result<Arc<PgClient>, LogError> {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.slots.len();
        let mut slot = self.slots[i].lock().await;
        match slot.as_ref() {
            Some(c) if !c.is_closed() => Ok(Arc::clone(c)),
            _ => {
                let c = Arc::new(open(&self.dsn, &self.tls).await?);
                *slot = Some(Arc::clone(&c));
                Ok(c)
            }
        }
    }

    /// One execution's events in the log's order.
    pub async fn events(&self, exec: &str) -> Result<Vec<LogEvent>, LogError> {
        Ok(self.events_with_order(exec).await?.0)
    }

    /// One execution's events in the log's order, with each row's order value.
    pub async fn events_with_order(
        &self,
        exec: &str,
    ) -> Result<(Vec<LogEvent>, Vec<i64>), LogError> {
        let t = &self.table;
        let sql = format!(
            "SELECT {}, {}::int8 FROM {} WHERE {} = {} ORDER BY {}",
            t.event_columns, t.order, t.table, t.execution, self.execution_param, t.order
        );
        let rows = self
            .conn()
            .await?
            .query(&sql, &[&exec])
            .await
            .map_err(unavailable)?;
        let events = rows
            .iter()
            .map(|row| log_event(exec, row))
            .collect::<Result<Vec<_>, _>>()?;
        Ok((events, rows.iter().map(|row| row.get(4)).collect()))
    }

    /// Rows past `cursor` (at most `limit`, in order), the count of rows in `(floor, cursor]`,
    /// the snapshot's horizon and the table's largest order value, all in one snapshot.
    pub async fn poll(&self, floor: i64, cursor: i64, limit: i64) -> Result<Poll, LogError> {
        let t = &self.table;
        // One statement, so one snapshot: the horizon, the count and the rows agree.
        let sql = format!(
            "WITH horizon AS (
               SELECT pg_snapshot_xmin(pg_current_snapshot())::text::int8 AS xmin,
                      pg_snapshot_xmax(pg_current_snapshot())::text::int8 AS xmax,
                      (SELECT count(*) FROM {tab} WHERE {o} > $1::int8 AND {o} <= $2::int8)::int8 AS win,
                      (SELECT max({o}) FROM {tab})::int8 AS top
             ), fresh AS (
               SELECT {o}::int8 AS o, {e}::text AS e FROM {tab} WHERE {o} > $2::int8 ORDER BY {o} LIMIT $3::int8
             )
             SELECT xmin, xmax, win, top, NULL::int8, NULL::text FROM horizon
             UNION ALL
             SELECT NULL, NULL, NULL, NULL, o, e FROM fresh",
            tab = t.table,
            o = t.order,
            e = t.execution,
        );
        let rows = self
            .conn()
            .await?
            .query(&sql, &[&floor, &cursor, &limit])
            .await
            .map_err(unavailable)?;
        let mut poll = Poll::default();
        let mut horizon = false;
        for r in &rows {
            if let Some(xmin) = r.get::<_, Option<i64>>(0) {
                horizon = true;
                poll.xmin = xmin as u64;
                poll.xmax = r.get::<_, Option<i64>>(1).unwrap_or(0) as u64;
                poll.window_rows = r.get::<_, Option<i64>>(2).unwrap_or(0) as u64;
                poll.log_position = r.get(3);
            } else if let Some(order) = r.get::<_, Option<i64>>(4) {
                poll.rows.push(RowRef {
                    order,
                    execution: r.get::<_, Option<String>>(5).unwrap_or_default(),
                });
            }
        }
        if !horizon {
            return Err(LogError::Unavailable("poll: no snapshot row".into()));
        }
        poll.rows.sort_by_key(|r| r.order);
        Ok(poll)
    }

    /// Every row in `(floor, cursor]`, to find those that committed after the cursor passed
    /// them.
    pub async fn window(&self, floor: i64, cursor: i64) -> Result<Vec<RowRef>, LogError> {
        let t = &self.table;
        let sql = format!(
            "SELECT {o}::int8, {e}::text FROM {tab} WHERE {o} > $1::int8 AND {o} <= $2::int8 ORDER BY {o}",
            o = t.order,
            e = t.execution,
            tab = t.table
        );
        let rows = self
            .conn()
            .await?
            .query(&sql, &[&floor, &cursor])
            .await
            .map_err(unavailable)?;
        Ok(rows
            .iter()
            .map(|r| RowRef {
                order: r.get(0),
                execution: r.get::<_, Option<String>>(1).unwrap_or_default(),
            })
            .collect())
    }

    /// Up to `n` executions picked at random rows of the table (an execution with more events
    /// is picked more often), without repeats.
    pub async fn sample(&self, n: usize) -> Result<Vec<String>, LogError> {
        let t = &self.table;
        let sql = format!(
            "SELECT {e}::text FROM {tab} WHERE {o} >= \
               (SELECT min({o}) + floor(random() * (max({o}) - min({o}) + 1))::int8 FROM {tab}) \
             ORDER BY {o} LIMIT 1",
            o = t.order,
            e = t.execution,
            tab = t.table
        );
        let conn = self.conn().await?;
        let mut picked = Vec::new();
        for _ in 0..n.saturating_mul(2) {
            if picked.len() >= n {
                break;
            }
            if let Some(row) = conn.query_opt(&sql, &[]).await.map_err(unavailable)? {
                let exec: Option<String> = row.get(0);
                if let Some(exec) = exec.filter(|e| !picked.contains(e)) {
                    picked.push(exec);
                }
            }
        }
        Ok(picked)
    }
}

/// A row as a log event, or why it is not one.
fn log_event(exec: &str, row: &Row) -> Result<LogEvent, LogError> {
    let order: i64 = row.get(4);
    let invalid = |what: String| LogError::Invalid(format!("{exec} row {order}: {what}"));
    let event: Option<String> = row.get(0);
    let event_id =
        EventId::new(event.unwrap_or_default()).map_err(|e| invalid(format!("event id: {e}")))?;
    let prev_event_id = row
        .get::<_, Option<String>>(1)
        .map(EventId::new)
        .transpose()
        .map_err(|e| invalid(format!("prev event id: {e}")))?;
    let parent_execution_id = row
        .get::<_, Option<String>>(2)
        .map(ExecutionId::new)
        .transpose()
        .map_err(|e| invalid(format!("parent execution id: {e}")))?;
    let payload = row
        .get::<_, Option<String>>(3)
        .map(|text| serde_json::from_str(&text))
        .transpose()
        .map_err(|e| invalid(format!("payload is not JSON: {e}")))?
        .unwrap_or(serde_json::Value::Null);
    Ok(LogEvent {
        event_id,
        prev_event_id,
        parent_execution_id,
        payload,
    })
}

impl LogSource for PgLog {
    fn read_log<'a>(
        &'a self,
        exec: &'a ExecutionId,
    ) -> BoxFuture<'a, Result<Vec<LogEvent>, LogError>> {
        Box::pin(self.events(exec.as_str()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> TableNames {
        TableNames {
            table: "public.events".into(),
            execution: "execution_id".into(),
            event: "event_id".into(),
            prev: "prev_event_id".into(),
            order: "id".into(),
            payload: "payload".into(),
            parent: None,
        }
    }

    #[test]
    fn names_are_quoted_and_anything_else_is_refused() {
        let t = PgTable::new(names()).unwrap();
        assert_eq!(t.table, "\"public\".\"events\"");
        assert_eq!(t.execution, "\"execution_id\"");
        for bad in [
            "",
            "1a",
            "a b",
            "x\"; drop table t; --",
            "a-b",
            &"a".repeat(64),
        ] {
            let mut n = names();
            n.payload = bad.into();
            assert!(PgTable::new(n).is_err(), "{bad:?} accepted");
        }
        let mut n = names();
        n.table = "a.b.c".into();
        assert!(PgTable::new(n).is_err());
    }
}
