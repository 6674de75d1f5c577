//! `chainstore-populator` end to end: a real PostgreSQL (Debian's server binaries, started on
//! loopback in a temporary directory), three real `chainstore-node` processes, and the
//! populator binary, while concurrent writers fill the event table.
//!
//! On the way: a row that commits long after rows inserted after it (the populator must still
//! populate it), a SIGKILL of the populator and its restart from the checkpoint, a SIGKILL of a
//! cluster node and its restart, an execution with two roots (refused, reported), and events
//! written to the store that the log does not hold (a divergence, reported). At the end every
//! healthy execution's guarded read equals the table's chain.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chainstore_client::{Client, PageRequest, ReadOptions};
use chainstore_model::{AppendRequest, EventId, ExecutionId, Guarded};
use chainstore_populator::Problem;
use chainstore_robustness::cluster::{http_get, user_ids, wait_ready, Cluster};
use serde_json::json;
use tokio_postgres::NoTls;

const EXECUTIONS: usize = 200;
const EVENTS: usize = 5;
const WRITERS: usize = 4;

/// The directory of PostgreSQL's server programs (`initdb`, `postgres`).
fn pg_bin() -> PathBuf {
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output() {
        let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if dir.join("initdb").exists() {
            return dir;
        }
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|d| d.flatten().map(|e| e.path().join("bin")).collect())
        .unwrap_or_default();
    found.sort();
    found
        .into_iter()
        .rev()
        .find(|d| d.join("initdb").exists())
        .expect(
            "PostgreSQL's server programs (Debian package postgresql; scripts/test.sh installs it)",
        )
}

fn is_root() -> bool {
    // SAFETY: getuid has no preconditions.
    unsafe { libc::getuid() == 0 }
}

/// A command run as the `postgres` user when this process is root (the server refuses root).
/// The child is the program itself (no `runuser` in between), so signals reach it.
fn as_pg_user(program: &Path) -> Command {
    use std::os::unix::process::CommandExt;
    let mut c = Command::new(program);
    if is_root() {
        let (uid, gid) =
            user_ids("postgres").expect("the postgres user (Debian's package makes it)");
        c.uid(uid).gid(gid);
    }
    c
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Three consecutive free ports.
fn free_ports() -> u16 {
    for _ in 0..100 {
        let base = free_port();
        if base < 65000
            && (1..3).all(|i| std::net::TcpListener::bind(("127.0.0.1", base + i)).is_ok())
        {
            return base;
        }
    }
    panic!("no three consecutive free ports");
}

struct Postgres {
    child: Child,
    port: u16,
    /// The CA of the server's certificate.
    ca_file: PathBuf,
}

/// A CA and a server certificate for 127.0.0.1 signed by it, written to `dir`; returns the CA's
/// path.
fn write_server_tls(dir: &Path) -> PathBuf {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate().unwrap();
    let ca_pem = ca_params.self_signed(&ca_key).unwrap().pem();
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["127.0.0.1".to_string()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    std::fs::write(dir.join("server.crt"), cert.pem()).unwrap();
    let key_path = dir.join("server.key");
    std::fs::write(&key_path, key.serialize_pem()).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let ca = dir.join("ca.crt");
    std::fs::write(&ca, ca_pem).unwrap();
    ca
}

impl Postgres {
    /// A server on loopback that also serves TLS, and that refuses the `populator` role any
    /// connection without it.
    fn start(dir: &Path) -> Self {
        let bin = pg_bin();
        let data = dir.join("pgdata");
        std::fs::create_dir_all(&data).unwrap();
        let ca_file = write_server_tls(dir);
        if is_root() {
            let status = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(dir)
                .status()
                .unwrap();
            assert!(status.success());
        }
        let out = as_pg_user(&bin.join("initdb"))
            .current_dir(dir)
            .args(["-A", "trust", "-U", "postgres", "--no-sync", "-D"])
            .arg(&data)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "initdb: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let hba = data.join("pg_hba.conf");
        let rules = std::fs::read_to_string(&hba).unwrap();
        std::fs::write(&hba, format!("hostnossl all populator all reject\n{rules}")).unwrap();
        let port = free_port();
        let log = std::fs::File::create(dir.join("postgres.log")).unwrap();
        let child = as_pg_user(&bin.join("postgres"))
            .current_dir(dir)
            .arg("-D")
            .arg(&data)
            .args([
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                "fsync=off",
                "-c",
                "ssl=on",
            ])
            .arg("-c")
            .arg(format!(
                "ssl_cert_file={}",
                dir.join("server.crt").display()
            ))
            .arg("-c")
            .arg(format!("ssl_key_file={}", dir.join("server.key").display()))
            .arg("-c")
            .arg(format!("unix_socket_directories={}", dir.display()))
            .args(["-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        Self {
            child,
            port,
            ca_file,
        }
    }

    /// A server in `dir` holding the shipped example table, and a connection to it.
    async fn with_events_table(dir: &Path) -> (Self, tokio_postgres::Client) {
        let pg = Self::start(dir);
        let db = pg.connect().await;
        db.batch_execute(include_str!("../../deploy/postgres/events.sql"))
            .await
            .unwrap();
        db.batch_execute("CREATE ROLE populator LOGIN; GRANT SELECT ON events TO populator")
            .await
            .unwrap();
        (pg, db)
    }

    /// The read-only role's connection string: TLS only (`--pg-ca-file`).
    fn populator_dsn(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user=populator dbname=postgres",
            self.port
        )
    }

    fn dsn(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user=postgres dbname=postgres",
            self.port
        )
    }

    async fn connect(&self) -> tokio_postgres::Client {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match tokio_postgres::connect(&self.dsn(), NoTls).await {
                Ok((client, connection)) => {
                    tokio::spawn(connection);
                    return client;
                }
                Err(e) => {
                    assert!(Instant::now() < deadline, "PostgreSQL did not start: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        // SIGINT: PostgreSQL's fast shutdown.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, libc::SIGINT);
        }
        let _ = self.child.wait();
    }
}

struct PopulatorProc {
    child: Option<Child>,
    args: Vec<String>,
    log: PathBuf,
    url: String,
}

impl PopulatorProc {
    /// The populator of `pg`'s `events` table into `cluster`, with its checkpoint and log in
    /// `dir`, metrics on a free port, and `extra` flags; not started yet.
    fn new(dir: &Path, cluster: &Cluster, pg: &Postgres, extra: &[&str]) -> Self {
        let port = free_port();
        let mut args: Vec<String> = vec![
            "--nodes".into(),
            cluster.urls().join(","),
            "--dsn".into(),
            pg.populator_dsn(),
            "--pg-ca-file".into(),
            pg.ca_file.display().to_string(),
            "--table".into(),
            "events".into(),
            "--checkpoint".into(),
            dir.join("checkpoint.json").display().to_string(),
            "--listen".into(),
            format!("127.0.0.1:{port}"),
        ];
        args.extend(extra.iter().map(|a| a.to_string()));
        Self {
            child: None,
            args,
            log: dir.join("populator.log"),
            url: format!("http://127.0.0.1:{port}"),
        }
    }

    fn start(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_chainstore-populator"))
            .args(&self.args)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    async fn metric(&self, name: &str) -> Option<f64> {
        let (_, body) = http_get(&format!("{}/metrics", self.url)).await?;
        body.lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
    }

    async fn problems(&self) -> Vec<Problem> {
        http_get(&format!("{}/problems", self.url))
            .await
            .and_then(|(_, body)| serde_json::from_str(&body).ok())
            .unwrap_or_default()
    }
}

impl Drop for PopulatorProc {
    fn drop(&mut self) {
        self.kill();
    }
}

fn exec_name(i: usize) -> String {
    format!("wf-{i:03}")
}

fn event_name(i: usize, n: usize) -> String {
    format!("wf-{i:03}-e{n}")
}

async fn insert(
    db: &tokio_postgres::Client,
    exec: &str,
    event: &str,
    prev: Option<&str>,
) -> Result<(), tokio_postgres::Error> {
    let payload = json!({ "event": event, "body": "x".repeat(64) }).to_string();
    db.execute(
        "INSERT INTO events (execution_id, event_id, prev_event_id, payload) \
         VALUES ($1, $2, $3, $4::text::jsonb)",
        &[&exec, &event, &prev, &payload],
    )
    .await
    .map(|_| ())
}

/// The one integer a query answers.
async fn scalar(db: &tokio_postgres::Client, sql: &str) -> i64 {
    db.query_one(sql, &[]).await.unwrap().get(0)
}

/// The table's chain of one execution, in log order.
async fn table_chain(db: &tokio_postgres::Client, exec: &str) -> Vec<(String, serde_json::Value)> {
    db.query(
        "SELECT event_id, payload::text FROM events WHERE execution_id = $1 ORDER BY id",
        &[&exec],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| {
        let payload: String = r.get(1);
        (r.get(0), serde_json::from_str(&payload).unwrap())
    })
    .collect()
}

/// Three `chainstore-node` processes in `dir/cluster`, once every one is ready.
async fn start_cluster(dir: &Path) -> Cluster {
    let cluster_dir = dir.join("cluster");
    std::fs::create_dir_all(&cluster_dir).unwrap();
    let mut cluster = Cluster::new(node_binary(), &cluster_dir, free_ports(), &[], Vec::new())
        .expect("cluster layout");
    for id in 1..=3 {
        cluster.start(id).unwrap();
    }
    assert!(
        wait_ready(&cluster.urls(), Duration::from_secs(60)).await,
        "cluster not ready"
    );
    cluster
}

fn node_binary() -> PathBuf {
    // target/<profile>/deps/populator-<hash> → target/<profile>/chainstore-node
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().and_then(Path::parent).unwrap();
    let bin = dir.join("chainstore-node");
    assert!(
        bin.exists(),
        "{} is not built (build the workspace)",
        bin.display()
    );
    bin
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_populator_keeps_the_cluster_in_step_with_a_postgres_table_through_failures() {
    let dir = tempfile::tempdir().unwrap();
    let (pg, db) = Postgres::with_events_table(dir.path()).await;
    db.batch_execute(include_str!("../../deploy/postgres/notify-trigger.sql"))
        .await
        .unwrap();

    let mut cluster = start_cluster(dir.path()).await;
    let client = Arc::new(
        Client::builder(cluster.urls())
            .jitter_seed(3)
            .build()
            .unwrap(),
    );

    let mut populator = PopulatorProc::new(
        dir.path(),
        &cluster,
        &pg,
        &[
            "--notify-channel",
            "chainstore_events",
            "--poll-interval-ms",
            "300",
            "--compare-every-s",
            "1",
            "--compare-sample",
            "20",
            "--batch-rows",
            "100",
        ],
    );
    populator.start();

    // An execution whose last event commits long after rows inserted after it.
    let late_exec = "late-1";
    insert(&db, late_exec, "late-1-e1", None).await.unwrap();
    let late_db = pg.connect().await;
    late_db.batch_execute("BEGIN").await.unwrap();
    insert(&late_db, late_exec, "late-1-e2", Some("late-1-e1"))
        .await
        .unwrap();

    // Writers: each owns every WRITERS-th execution and adds one event to each in turn, so
    // executions grow while the populator reads them.
    let started = Instant::now();
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let writer_db = pg.connect().await;
        writers.push(tokio::spawn(async move {
            for n in 1..=EVENTS {
                for i in (w..EXECUTIONS).step_by(WRITERS) {
                    let prev = (n > 1).then(|| event_name(i, n - 1));
                    insert(
                        &writer_db,
                        &exec_name(i),
                        &event_name(i, n),
                        prev.as_deref(),
                    )
                    .await
                    .unwrap();
                    tokio::time::sleep(Duration::from_millis(8)).await;
                }
            }
        }));
    }

    // Two roots: refused.
    insert(&db, "two-roots", "tr-a", None).await.unwrap();
    insert(&db, "two-roots", "tr-b", None).await.unwrap();

    // The populator dies mid-run and comes back from its checkpoint.
    tokio::time::sleep(Duration::from_secs(2)).await;
    populator.kill();
    tokio::time::sleep(Duration::from_millis(500)).await;
    populator.start();

    // A cluster node dies and comes back.
    tokio::time::sleep(Duration::from_secs(1)).await;
    cluster.kill(2);
    tokio::time::sleep(Duration::from_secs(2)).await;
    late_db.batch_execute("COMMIT").await.unwrap();
    cluster.start(2).unwrap();

    for w in writers {
        w.await.unwrap();
    }
    eprintln!("writers done in {:.1} s", started.elapsed().as_secs_f64());

    // A second writer: an event in the store that the log never gets, then the log's own
    // next event at that position.
    let second = exec_name(0);
    wait_for_chain(&client, &second, EVENTS).await;
    client
        .append(
            &ExecutionId::new(&second).unwrap(),
            &AppendRequest {
                event_id: EventId::new("intruder").unwrap(),
                prev_event_id: Some(EventId::new(event_name(0, EVENTS)).unwrap()),
                parent_execution_id: None,
                payload: json!({ "not": "in the log" }),
                genesis: false,
            },
        )
        .await
        .unwrap();
    insert(
        &db,
        &second,
        &event_name(0, EVENTS + 1),
        Some(&event_name(0, EVENTS)),
    )
    .await
    .unwrap();

    // Caught up: the populator has read through the table's last row and its checkpoint
    // followed.
    let last = scalar(&db, "SELECT max(id) FROM events").await;
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let populated = populator
            .metric("chainstore_populator_populated_position")
            .await;
        let checkpoint = populator
            .metric("chainstore_populator_checkpoint_position")
            .await;
        if populated == Some(last as f64) && checkpoint == Some(last as f64) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the populator did not catch up: populated {populated:?}, checkpoint {checkpoint:?}, \
             table {last}; log {}",
            std::fs::read_to_string(&populator.log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Every healthy execution reads back as the table holds it.
    let mut healthy: Vec<String> = (1..EXECUTIONS).map(exec_name).collect();
    healthy.push(late_exec.to_string());
    for exec in &healthy {
        let want = table_chain(&db, exec).await;
        let read = client
            .chain(&ExecutionId::new(exec).unwrap(), ReadOptions::default())
            .await
            .unwrap();
        let Guarded::Authoritative(events) = read.answer else {
            panic!("{exec}: not authoritative: {:?}", read.answer);
        };
        let got: Vec<(String, serde_json::Value)> = events
            .iter()
            .map(|e| (e.event_id.to_string(), e.payload.clone()))
            .collect();
        assert_eq!(got, want, "{exec}");
    }
    assert_eq!(table_chain(&db, late_exec).await.len(), 2);

    // The refusal and the divergence are reported, with their reasons.
    let problems = populator.problems().await;
    let outcome_of =
        |exec: &str| -> Vec<&Problem> { problems.iter().filter(|p| p.execution == exec).collect() };
    let two_roots = outcome_of("two-roots");
    assert!(
        two_roots
            .iter()
            .any(|p| p.outcome == "refused" && p.detail.contains("root")),
        "two roots not reported as refused: {problems:#?}"
    );
    let diverged = outcome_of(&second);
    assert!(
        diverged
            .iter()
            .any(|p| p.outcome == "diverged" && p.detail.contains("intruder")),
        "the second writer not reported: {problems:#?}"
    );
    let unexpected: Vec<&Problem> = problems
        .iter()
        .filter(|p| p.execution != "two-roots" && p.execution != second)
        .collect();
    assert!(
        unexpected.is_empty(),
        "unexpected problems: {unexpected:#?}"
    );

    // The comparator ran and reports agreement and coverage.
    let deadline = Instant::now() + Duration::from_secs(30);
    while populator
        .metric("chainstore_populator_compared_total")
        .await
        .unwrap_or(0.0)
        < 20.0
    {
        assert!(Instant::now() < deadline, "the comparator never ran");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let m = |name: &'static str| {
        let p = &populator;
        async move { p.metric(name).await.unwrap_or(f64::NAN) }
    };
    eprintln!(
        "comparator: compared {}, answered {}, agreed {}; last run agreement {:.3}, coverage {:.3}; \
         late rows {}; outcomes in log: {}",
        m("chainstore_populator_compared_total").await,
        m("chainstore_populator_answered_total").await,
        m("chainstore_populator_agreed_total").await,
        m("chainstore_populator_agreement_ratio").await,
        m("chainstore_populator_coverage_ratio").await,
        m("chainstore_populator_late_rows_total").await,
        problems.len(),
    );
    let outcomes: BTreeMap<String, f64> = http_get(&format!("{}/metrics", populator.url))
        .await
        .map(|(_, body)| {
            body.lines()
                .filter(|l| l.starts_with("chainstore_populator_outcomes_total{"))
                .filter_map(|l| {
                    let (k, v) = l.rsplit_once(' ')?;
                    Some((k.to_string(), v.parse().ok()?))
                })
                .collect()
        })
        .unwrap_or_default();
    eprintln!("outcomes: {outcomes:?}");
    let count = |outcome: &str| {
        outcomes
            .get(&format!(
                "chainstore_populator_outcomes_total{{outcome=\"{outcome}\"}}"
            ))
            .copied()
            .unwrap_or(0.0)
    };
    assert!(
        count("refused") >= 1.0 && count("diverged") >= 1.0,
        "{outcomes:?}"
    );
    // These are the restarted process's counts (the first one's died with it): it has
    // populated, and nothing unhealthy happened.
    assert!(count("extended") >= 1.0, "{outcomes:?}");
    for unhealthy in ["second_writer", "invalid_log", "rejected"] {
        assert_eq!(count(unhealthy), 0.0, "{outcomes:?}");
    }

    // Every series the Grafana dashboard plots is one a node or the populator exports (the
    // certificate's expiry only on a node serving TLS, which these are not).
    let mut exported = metric_names(
        &http_get(&format!("{}/metrics", populator.url))
            .await
            .unwrap()
            .1,
    );
    exported.extend(metric_names(
        &http_get(&format!("{}/metrics", cluster.url(1)))
            .await
            .unwrap()
            .1,
    ));
    let dashboard = include_str!("../../deploy/grafana/chainstore.json");
    let plotted = series_in(dashboard);
    assert!(plotted.len() > 20, "{plotted:?}");
    for name in plotted {
        assert!(
            exported.contains(&name) || name == "chainstore_tls_certificate_not_after_seconds",
            "the dashboard plots {name}, which nothing exports"
        );
    }

    // chainctl populates one execution from the table through the same reconciler.
    let chainctl = |exec: &str| {
        Command::new(env!("CARGO_BIN_EXE_chainctl"))
            .args(["--nodes", &cluster.urls().join(","), "--json", "populate"])
            .args(["--from-postgres", &pg.populator_dsn(), "--execution", exec])
            .args(["--pg-ca-file".as_ref(), pg.ca_file.as_os_str()])
            .output()
            .unwrap()
    };
    let healthy = chainctl(&exec_name(7));
    let text = String::from_utf8_lossy(&healthy.stdout);
    assert_eq!(
        healthy.status.code(),
        Some(0),
        "{text} {}",
        String::from_utf8_lossy(&healthy.stderr)
    );
    assert!(text.contains("\"in_sync\""), "{text}");
    let refused = chainctl("two-roots");
    let text = String::from_utf8_lossy(&refused.stdout);
    assert_eq!(refused.status.code(), Some(1), "{text}");
    assert!(text.contains("\"refused\""), "{text}");

    // The read-only role only gets in over TLS: without --pg-ca-file the server refuses the
    // plaintext connection, and a certificate of another CA is refused by the client.
    let other_dir = dir.path().join("other-ca");
    std::fs::create_dir_all(&other_dir).unwrap();
    let other_ca = write_server_tls(&other_dir);
    for (tls, expect) in [(None, "pg_hba.conf"), (Some(other_ca), "certificate")] {
        let mut command = Command::new(env!("CARGO_BIN_EXE_chainctl"));
        command
            .args(["--nodes", &cluster.urls().join(","), "populate"])
            .args(["--from-postgres", &pg.populator_dsn(), "--execution", "x"]);
        if let Some(ca) = &tls {
            command.arg("--pg-ca-file").arg(ca);
        }
        let out = command.output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{tls:?}: {err}");
        assert!(err.contains(expect), "{tls:?}: {err}");
    }

    // The populator proposed the repair of the diverged execution (and did not run it);
    // chainctl runs it: the store rebuilds the execution from the table and keeps what it held.
    assert!(
        diverged.iter().any(|p| p
            .repair
            .as_deref()
            .is_some_and(|r| r.contains(&format!("chainctl repair {second}")))),
        "no repair proposed: {diverged:#?}"
    );
    let repair = || {
        Command::new(env!("CARGO_BIN_EXE_chainctl"))
            .args([
                "--nodes",
                &cluster.urls().join(","),
                "--json",
                "repair",
                &second,
            ])
            .args([
                "--from-postgres",
                &pg.dsn(),
                "--reason",
                "a second writer, found by the test",
            ])
            .output()
            .unwrap()
    };
    let repaired = repair();
    let text = String::from_utf8_lossy(&repaired.stdout);
    assert_eq!(
        repaired.status.code(),
        Some(0),
        "{text} {}",
        String::from_utf8_lossy(&repaired.stderr)
    );
    let answer: chainstore_model::api::RebuildAnswer = serde_json::from_str(&text).expect("{text}");
    let want = table_chain(&db, &second).await;
    assert_eq!(answer.total, want.len() as u64);
    assert_eq!(answer.quarantine.events, EVENTS as u64 + 1, "{answer:?}");
    assert!(
        answer.quarantine.diagnosis.contains("intruder"),
        "{answer:?}"
    );
    let id = ExecutionId::new(&second).unwrap();
    let read = client.chain(&id, ReadOptions::default()).await.unwrap();
    let Guarded::Authoritative(events) = read.answer else {
        panic!(
            "{second} not authoritative after its repair: {:?}",
            read.answer
        );
    };
    let got: Vec<(String, serde_json::Value)> = events
        .iter()
        .map(|e| (e.event_id.to_string(), e.payload.clone()))
        .collect();
    assert_eq!(got, want, "{second} after its repair");
    let list = client
        .quarantine(&id, ReadOptions::default())
        .await
        .unwrap();
    assert_eq!(list.records, vec![answer.quarantine.clone()]);
    let kept = client
        .quarantined(&id, 1, PageRequest::first(), ReadOptions::default())
        .await
        .unwrap();
    assert_eq!(
        kept.events
            .last()
            .map(|e| e.event_id.to_string())
            .as_deref(),
        Some("intruder")
    );
    // Nothing left to repair: refused, and nothing moves.
    let again = repair();
    assert_eq!(
        again.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&again.stdout)
    );
    let list = client
        .quarantine(&id, ReadOptions::default())
        .await
        .unwrap();
    assert_eq!(list.records.len(), 1);
}

/// The series names in a Prometheus text exposition.
fn metric_names(text: &str) -> std::collections::BTreeSet<String> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_string)
        .collect()
}

/// Every `chainstore_...` name a text mentions.
fn series_in(text: &str) -> std::collections::BTreeSet<String> {
    text.match_indices("chainstore_")
        .map(|(at, _)| {
            text[at..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                .collect::<String>()
        })
        .filter(|name| name.len() > "chainstore_".len())
        .collect()
}

/// Waits until the store serves `exec` with `len` events.
async fn wait_for_chain(client: &Client, exec: &str, len: usize) {
    let id = ExecutionId::new(exec).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(read) = client.chain(&id, ReadOptions::default()).await {
            if let Guarded::Authoritative(events) = &read.answer {
                if events.len() >= len {
                    return;
                }
            }
        }
        assert!(
            Instant::now() < deadline,
            "{exec} never reached {len} events"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The initial backfill, by hand (`scripts/backfill.sh`, a release build): a table of
/// `CHAINSTORE_BACKFILL_EXECUTIONS` executions (100,000 unless set) of ten events each, filled
/// before the populator starts; prints the time, the rate and the populator's peak memory, and
/// fails if the populator's memory grows past 256 MiB or a sampled execution differs.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "minutes of work: run by scripts/backfill.sh"]
async fn backfill() {
    let executions: i64 = std::env::var("CHAINSTORE_BACKFILL_EXECUTIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let dir = tempfile::tempdir().unwrap();
    let (pg, db) = Postgres::with_events_table(dir.path()).await;
    let filling = Instant::now();
    // Ten events per execution, interleaved across executions as a busy log would be.
    db.execute(
        "INSERT INTO events (execution_id, event_id, prev_event_id, payload)
         SELECT 'bf-' || x, 'bf-' || x || '-e' || n,
                CASE WHEN n > 1 THEN 'bf-' || x || '-e' || (n - 1) END,
                jsonb_build_object('n', n, 'body', repeat('x', 150))
         FROM generate_series(1, 10) AS n, generate_series(1, $1::int8) AS x
         ORDER BY n, x",
        &[&executions],
    )
    .await
    .unwrap();
    let rows = scalar(&db, "SELECT count(*) FROM events").await;
    let last = scalar(&db, "SELECT max(id) FROM events").await;
    eprintln!(
        "table filled: {rows} rows of {executions} executions in {:.1} s",
        filling.elapsed().as_secs_f64()
    );

    let cluster = start_cluster(dir.path()).await;
    let client = Client::builder(cluster.urls()).build().unwrap();

    let mut populator = PopulatorProc::new(dir.path(), &cluster, &pg, &["--compare-every-s", "0"]);
    let started = Instant::now();
    populator.start();
    let pid = populator.child.as_ref().unwrap().id();
    let mut peak_kib = 0u64;
    loop {
        peak_kib = peak_kib.max(vm_hwm_kib(pid));
        if populator
            .metric("chainstore_populator_checkpoint_position")
            .await
            == Some(last as f64)
        {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(3600),
            "no end to the backfill"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let took = started.elapsed().as_secs_f64();
    let populated = populator
        .metric("chainstore_populator_executions_populated_total")
        .await
        .unwrap_or(0.0);
    eprintln!(
        "backfill: {executions} executions, {rows} events in {took:.1} s: {:.0} executions/s, \
         {:.0} events/s ({populated} populate calls); populator peak RSS {} MiB",
        executions as f64 / took,
        rows as f64 / took,
        peak_kib / 1024
    );
    assert!(
        populator.problems().await.is_empty(),
        "{:?}",
        populator.problems().await
    );
    for x in [1, executions / 2, executions] {
        let exec = format!("bf-{x}");
        let read = client
            .chain(&ExecutionId::new(&exec).unwrap(), ReadOptions::default())
            .await
            .unwrap();
        let Guarded::Authoritative(events) = read.answer else {
            panic!("{exec}: {:?}", read.answer);
        };
        let want = table_chain(&db, &exec).await;
        assert_eq!(events.len(), want.len(), "{exec}");
    }
    assert!(peak_kib < 256 * 1024, "populator peak RSS {peak_kib} KiB");
}

/// A process's peak resident memory (VmHWM), in KiB.
fn vm_hwm_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}
