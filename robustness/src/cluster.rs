//! The three node processes and the faults done to them: SIGKILL and restart, SIGSTOP and
//! SIGCONT, and a cut from the peers (iptables rules matching the node's Unix user, so clients on
//! loopback still reach it).

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use chainstore_model::api::RaftRole;

use crate::workload::single_node_client;

/// Tags every iptables rule of a run, so that cleaning up removes exactly those.
const RULE_TAG: &str = "chainstore-robustness";

/// One node process.
pub struct NodeProc {
    pub id: u64,
    pub port: u16,
    data_dir: PathBuf,
    log: PathBuf,
    secret: PathBuf,
    /// The Unix user and group the node runs as (`None`: this process's own; no cuts possible).
    pub uid: Option<(u32, u32)>,
    child: Option<Child>,
    pub stopped: bool,
    pub cut: bool,
}

/// The cluster: its nodes and how they are started.
pub struct Cluster {
    pub nodes: Vec<NodeProc>,
    bin: PathBuf,
    extra_args: Vec<String>,
}

impl Cluster {
    /// Lays out `dir` for three nodes on `base_port ..`; `uids` (user and group, one per node,
    /// or empty) are who the nodes run as.
    pub fn new(
        bin: PathBuf,
        dir: &Path,
        base_port: u16,
        uids: &[(u32, u32)],
        extra_args: Vec<String>,
    ) -> std::io::Result<Self> {
        let secret = random_hex(24)?;
        let mut nodes = Vec::new();
        for id in 1..=3u64 {
            let data_dir = dir.join(format!("node-{id}"));
            fs::create_dir_all(&data_dir)?;
            let uid = uids.get(id as usize - 1).copied();
            let secret_path = dir.join(format!("node-{id}.secret"));
            fs::write(&secret_path, &secret)?;
            fs::set_permissions(&secret_path, fs::Permissions::from_mode(0o600))?;
            if let Some(uid) = uid {
                chown(&data_dir, uid)?;
                chown(&secret_path, uid)?;
            }
            nodes.push(NodeProc {
                id,
                port: base_port + id as u16 - 1,
                data_dir,
                log: dir.join(format!("node-{id}.log")),
                secret: secret_path,
                uid,
                child: None,
                stopped: false,
                cut: false,
            });
        }
        Ok(Self {
            nodes,
            bin,
            extra_args,
        })
    }

    pub fn url(&self, id: u64) -> String {
        format!("http://127.0.0.1:{}", self.node(id).port)
    }

    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(|n| self.url(n.id)).collect()
    }

    pub fn node(&self, id: u64) -> &NodeProc {
        &self.nodes[id as usize - 1]
    }

    fn node_mut(&mut self, id: u64) -> &mut NodeProc {
        &mut self.nodes[id as usize - 1]
    }

    /// Starts node `id` (every node is given the same bootstrap voters; the lowest id
    /// initializes the cluster once).
    pub fn start(&mut self, id: u64) -> std::io::Result<()> {
        let voters: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("{}=127.0.0.1:{}", n.id, n.port))
            .collect();
        let node = &self.nodes[id as usize - 1];
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&node.log)?;
        let mut command = Command::new(&self.bin);
        command
            .arg("--id")
            .arg(id.to_string())
            .arg("--listen")
            .arg(format!("127.0.0.1:{}", node.port))
            .arg("--data-dir")
            .arg(&node.data_dir)
            .arg("--cluster-secret-file")
            .arg(&node.secret)
            .arg("--bootstrap-voters")
            .arg(voters.join(","))
            .args(["--insecure-no-tls", "--insecure-no-client-auth"])
            .args(&self.extra_args)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        if let Some((uid, gid)) = node.uid {
            command.uid(uid).gid(gid);
        }
        let child = command.spawn()?;
        let node = self.node_mut(id);
        node.child = Some(child);
        node.stopped = false;
        Ok(())
    }

    pub fn is_running(&self, id: u64) -> bool {
        self.node(id).child.is_some()
    }

    /// The process id of a running node.
    pub fn pid(&self, id: u64) -> Option<u32> {
        self.node(id).child.as_ref().map(Child::id)
    }

    /// SIGKILL, and reaps the process.
    pub fn kill(&mut self, id: u64) {
        let node = self.node_mut(id);
        if let Some(mut child) = node.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        node.stopped = false;
    }

    /// SIGTERM, and waits up to `within` for the node to exit by itself (a leader hands its
    /// leadership over first); SIGKILL after that. Whether it exited by itself.
    pub async fn terminate(&mut self, id: u64, within: Duration) -> bool {
        self.signal(id, libc::SIGTERM);
        let deadline = tokio::time::Instant::now() + within;
        let node = self.node_mut(id);
        let Some(mut child) = node.child.take() else {
            return false;
        };
        node.stopped = false;
        loop {
            if let Ok(Some(_)) = child.try_wait() {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn signal(&mut self, id: u64, signal: libc::c_int) {
        if let Some(child) = &self.node(id).child {
            // The pid is our own child's, alive or a zombie we have not reaped: never reused.
            unsafe {
                libc::kill(child.id() as libc::pid_t, signal);
            }
        }
    }

    /// SIGSTOP: the process is frozen, its sockets open.
    pub fn pause(&mut self, id: u64) {
        self.signal(id, libc::SIGSTOP);
        self.node_mut(id).stopped = true;
    }

    pub fn resume(&mut self, id: u64) {
        self.signal(id, libc::SIGCONT);
        self.node_mut(id).stopped = false;
    }

    /// Cuts node `id` off from its peers in both directions; clients still reach it.
    pub fn cut(&mut self, id: u64) -> Result<(), String> {
        self.cut_rules(id, "-I")?;
        self.node_mut(id).cut = true;
        Ok(())
    }

    pub fn heal(&mut self, id: u64) -> Result<(), String> {
        self.cut_rules(id, "-D")?;
        self.node_mut(id).cut = false;
        Ok(())
    }

    fn cut_rules(&self, id: u64, action: &str) -> Result<(), String> {
        let me = self.node(id);
        let (my_uid, _) = me.uid.ok_or("cuts need one Unix user per node")?;
        for other in self.nodes.iter().filter(|n| n.id != id) {
            let (other_uid, _) = other.uid.ok_or("cuts need one Unix user per node")?;
            // What this node sends to the other's port, and what the other sends to this one's.
            for (uid, port) in [(my_uid, other.port), (other_uid, me.port)] {
                iptables(&[
                    action,
                    "OUTPUT",
                    "-o",
                    "lo",
                    "-p",
                    "tcp",
                    "--dport",
                    &port.to_string(),
                    "-m",
                    "owner",
                    "--uid-owner",
                    &uid.to_string(),
                    "-m",
                    "comment",
                    "--comment",
                    RULE_TAG,
                    "-j",
                    "DROP",
                ])?;
            }
        }
        Ok(())
    }

    /// Ends every fault: cuts healed, paused nodes resumed, stopped nodes started.
    pub fn heal_all(&mut self) -> Result<(), String> {
        remove_tagged_rules()?;
        for id in 1..=3 {
            self.node_mut(id).cut = false;
            if self.node(id).stopped {
                self.resume(id);
            }
            if !self.is_running(id) {
                self.start(id).map_err(|e| format!("start n{id}: {e}"))?;
            }
        }
        Ok(())
    }

    /// Kills every node (at the end of the run, or on the way out after a failure).
    pub fn kill_all(&mut self) {
        for id in 1..=3 {
            if self.node(id).stopped {
                self.resume(id);
            }
            self.kill(id);
        }
        let _ = remove_tagged_rules();
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.kill_all();
    }
}

fn iptables(args: &[&str]) -> Result<(), String> {
    let out = Command::new("iptables")
        .args(["-w", "5"])
        .args(args)
        .output()
        .map_err(|e| format!("iptables: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "iptables {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Removes every rule this tool added (from this run or an earlier one that died).
pub fn remove_tagged_rules() -> Result<(), String> {
    let out = Command::new("iptables")
        .args(["-w", "5", "-S", "OUTPUT"])
        .output()
        .map_err(|e| format!("iptables: {e}"))?;
    if !out.status.success() {
        // No iptables (runs without cuts): nothing to remove.
        return Ok(());
    }
    for rule in String::from_utf8_lossy(&out.stdout).lines() {
        if let Some(spec) = rule.strip_prefix("-A ").filter(|r| r.contains(RULE_TAG)) {
            let mut args = vec!["-D"];
            args.extend(spec.split_whitespace());
            iptables(&args)?;
        }
    }
    Ok(())
}

fn chown(path: &Path, (uid, gid): (u32, u32)) -> std::io::Result<()> {
    std::os::unix::fs::chown(path, Some(uid), Some(gid))
}

/// The user and group ids of `name`, from `/etc/passwd`.
pub fn user_ids(name: &str) -> Result<(u32, u32), String> {
    let passwd = fs::read_to_string("/etc/passwd").map_err(|e| format!("/etc/passwd: {e}"))?;
    passwd
        .lines()
        .map(|line| line.split(':').collect::<Vec<_>>())
        .find(|fields| fields.first() == Some(&name))
        .and_then(|fields| Some((fields.get(2)?.parse().ok()?, fields.get(3)?.parse().ok()?)))
        .ok_or_else(|| format!("no user {name} in /etc/passwd"))
}

fn random_hex(bytes: usize) -> std::io::Result<String> {
    let mut buf = vec![0u8; bytes];
    use std::io::Read;
    fs::File::open("/dev/urandom")?.read_exact(&mut buf)?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

/// Waits until every node answers `/readyz` with 200.
pub async fn wait_ready(urls: &[String], within: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let mut ready = 0;
        for url in urls {
            if http_ok(&format!("{url}/readyz")).await {
                ready += 1;
            }
        }
        if ready == urls.len() {
            return true;
        }
        if tokio::time::Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A GET answered 200 (a bare HTTP/1.1 request: the probe needs no client library).
async fn http_ok(url: &str) -> bool {
    http_get(url).await.is_some_and(|(status, _)| status == 200)
}

/// A GET's status and body (a bare HTTP/1.1 request, the connection closed after it), or
/// `None` when the node does not answer within a second.
pub async fn http_get(url: &str) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rest = url.strip_prefix("http://")?;
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    let attempt = async {
        let mut stream = tokio::net::TcpStream::connect(host).await.ok()?;
        let request = format!("GET /{path} HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await.ok()?;
        let answer = String::from_utf8_lossy(&answer).into_owned();
        let status = answer.get(9..12)?.parse().ok()?;
        let body = answer.split_once("\r\n\r\n").map(|(_, b)| b.to_string())?;
        Some((status, body))
    };
    tokio::time::timeout(Duration::from_secs(1), attempt)
        .await
        .ok()
        .flatten()
}

/// The node that says it leads, if one does.
pub async fn leader_of(urls: &[String]) -> Option<u64> {
    for url in urls {
        let client = single_node_client(url, Duration::from_millis(500));
        if let Ok(status) = client.cluster().await {
            if status.state == RaftRole::Leader {
                return Some(status.node_id);
            }
        }
    }
    None
}
