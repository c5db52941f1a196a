//! redis-server processes for the tests: each on a free loopback port, no persistence, its
//! files (and pid file, which ci/check.d/45-redis.sh's trap reads) in a temporary folder;
//! stopped on drop. A tiny RESP client reads the server's state (TIME, DBSIZE, values).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The folder servers keep their files in (`$SLUICEGATE_REDIS_TMP`, else a new one).
fn dir() -> PathBuf {
    let base = std::env::var_os("SLUICEGATE_REDIS_TMP")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let d = base.join(format!(
        "sg-redis-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn exe(name: &str) -> String {
    let var = if name == "redis-server" {
        "REDIS_SERVER"
    } else {
        "REDIS_CLI"
    };
    std::env::var(var).unwrap_or_else(|_| name.to_string())
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub struct Server {
    pub port: u16,
    child: Option<Child>,
    dir: PathBuf,
    extra: Vec<String>,
}

impl Server {
    pub fn start() -> Server {
        Self::start_with(&[])
    }

    pub fn start_with(extra: &[&str]) -> Server {
        let mut s = Server {
            port: free_port(),
            child: None,
            dir: dir(),
            extra: extra.iter().map(|s| s.to_string()).collect(),
        };
        s.spawn();
        s
    }

    fn spawn(&mut self) {
        let port = self.port.to_string();
        let pid = self.dir.join(format!("redis-{port}.pid"));
        let child = Command::new(exe("redis-server"))
            .args([
                "--port",
                &port,
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .args([
                "--daemonize",
                "no",
                "--loglevel",
                "warning",
                "--logfile",
                "",
            ])
            .arg("--dir")
            .arg(&self.dir)
            .arg("--pidfile")
            .arg(&pid)
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start redis-server (apt-get install redis-server): {e}")
            });
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(mut c) = Resp::connect(self.port) {
                if c.cmd(&["PING"]).is_ok() {
                    return;
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("redis-server on port {port} did not answer");
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn resp(&self) -> Resp {
        Resp::connect(self.port).unwrap()
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([sig, &self.pid().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {sig}");
    }

    pub fn pause(&self) {
        self.signal("-STOP");
    }

    pub fn resume(&self) {
        self.signal("-CONT");
    }

    /// SIGKILL, then wait for the process.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// A new process on the same port (empty: no persistence).
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.child.is_some() {
            self.resume_quietly();
        }
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Server {
    fn resume_quietly(&self) {
        let _ = Command::new("kill")
            .args(["-CONT", &self.pid().to_string()])
            .status();
    }
}

/// A Redis Sentinel (`redis-server CONF --sentinel`) watching one master as `mymaster`.
pub struct Sentinel {
    pub port: u16,
    child: Child,
    dir: PathBuf,
    /// The sentinel's own password (`requirepass`), if it has one.
    password: Option<String>,
}

impl Sentinel {
    pub fn start(master_port: u16) -> Sentinel {
        Sentinel::start_with_auth(master_port, None, None)
    }

    /// A sentinel of a master whose password is `master_password`, itself asking clients for
    /// `password`.
    pub fn start_with_auth(
        master_port: u16,
        master_password: Option<&str>,
        password: Option<&str>,
    ) -> Sentinel {
        let (port, dir) = (free_port(), dir());
        let conf = dir.join("sentinel.conf");
        let mut auth = String::new();
        if let Some(p) = master_password {
            auth.push_str(&format!("sentinel auth-pass mymaster {p}\n"));
        }
        if let Some(p) = password {
            auth.push_str(&format!("requirepass {p}\n"));
        }
        std::fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\ndaemonize no\nloglevel warning\nlogfile \"\"\n\
                 pidfile {}\ndir {}\n\
                 sentinel monitor mymaster 127.0.0.1 {master_port} 1\n\
                 sentinel down-after-milliseconds mymaster 1000\n\
                 sentinel failover-timeout mymaster 5000\n{auth}",
                dir.join(format!("sentinel-{port}.pid")).display(),
                dir.display()
            ),
        )
        .unwrap();
        let child = Command::new(exe("redis-server"))
            .arg(&conf)
            .arg("--sentinel")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server --sentinel");
        let s = Sentinel {
            port,
            child,
            dir,
            password: password.map(str::to_string),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while s.master_port() != Some(master_port) {
            assert!(Instant::now() < deadline, "the sentinel did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        s
    }

    /// The port of the master the sentinel names now.
    pub fn master_port(&self) -> Option<u16> {
        let mut c = Resp::connect(self.port).ok()?;
        if let Some(p) = &self.password {
            c.cmd(&["AUTH", p]).ok()?;
        }
        match c
            .cmd(&["SENTINEL", "get-master-addr-by-name", "mymaster"])
            .ok()?
        {
            Reply::Array(v) => match v.get(1) {
                Some(Reply::Bulk(p)) => p.parse().ok(),
                _ => None,
            },
            _ => None,
        }
    }

    pub fn resp(&self) -> Resp {
        Resp::connect(self.port).unwrap()
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A self-signed certificate authority and a server certificate for 127.0.0.1 (openssl), in
/// a folder of their own: `ca.crt`, `server.crt`, `server.key`.
pub struct Certs {
    pub dir: PathBuf,
}

impl Certs {
    pub fn make() -> Certs {
        let dir = dir();
        let run = |args: &[&str]| {
            let out = Command::new("openssl")
                .args(args)
                .current_dir(&dir)
                .output()
                .expect("openssl (apt-get install openssl)");
            assert!(
                out.status.success(),
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        std::fs::write(dir.join("ext.cnf"), "subjectAltName=IP:127.0.0.1\n").unwrap();
        run(&[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-days",
            "2",
            "-subj",
            "/CN=sluicegate test CA",
        ]);
        run(&[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=127.0.0.1",
        ]);
        run(&[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.crt",
            "-days",
            "2",
            "-extfile",
            "ext.cnf",
        ]);
        Certs { dir }
    }

    pub fn path(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }
}

impl Drop for Certs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A Redis Cluster of three masters on loopback, made with `redis-cli --cluster create`.
pub struct Cluster {
    pub nodes: Vec<Server>,
    /// Every node's password (`requirepass` and `masterauth`), if they have one.
    password: Option<String>,
}

impl Cluster {
    pub fn start() -> Cluster {
        Cluster::start_with_password(None)
    }

    /// A cluster node (not yet a member of any cluster but its own).
    fn node(password: Option<&str>) -> Server {
        let mut args = vec!["--cluster-enabled", "yes", "--cluster-node-timeout", "2000"];
        if let Some(p) = password {
            args.extend(["--requirepass", p, "--masterauth", p]);
        }
        Server::start_with(&args)
    }

    /// Three masters whose clients (and each other) must give `password`.
    pub fn start_with_password(password: Option<&str>) -> Cluster {
        let nodes: Vec<Server> = (0..3).map(|_| Cluster::node(password)).collect();
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let mut cli = Command::new(exe("redis-cli"));
        if let Some(p) = password {
            cli.args(["--no-auth-warning", "-a", p]);
        }
        let out = cli
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .expect("redis-cli");
        assert!(
            out.status.success(),
            "cluster create: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let cluster = Cluster {
            nodes,
            password: password.map(str::to_string),
        };
        cluster.wait_ready();
        cluster
    }

    /// Waits until every node says the cluster is ok (each knows every slot's master).
    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let ok = (0..self.nodes.len()).all(|n| match self.resp(n).cmd(&["CLUSTER", "INFO"]) {
                Ok(Reply::Bulk(s)) => s.contains("cluster_state:ok"),
                _ => false,
            });
            if ok {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the cluster did not become ready"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// A fourth (fifth...) master with no slots, met by every node: its index. The limiter's
    /// cluster client has no connection to it (CLUSTER SLOTS does not name a master without
    /// slots) until a slot is moved to it.
    pub fn add_master(&mut self) -> usize {
        let node = Cluster::node(self.password.as_deref());
        let port = node.port.to_string();
        self.nodes.push(node);
        let new = self.nodes.len() - 1;
        self.ok(0, &["CLUSTER", "MEET", "127.0.0.1", &port]);
        // Every node knows every other, connected (no handshake left).
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let known = (0..self.nodes.len()).all(|n| {
                let Ok(Reply::Bulk(s)) = self.resp(n).cmd(&["CLUSTER", "NODES"]) else {
                    return false;
                };
                let lines: Vec<&str> = s.lines().filter(|l| !l.is_empty()).collect();
                lines.len() == self.nodes.len()
                    && lines
                        .iter()
                        .all(|l| l.contains(" connected") && !l.contains("handshake"))
            });
            if known {
                break;
            }
            assert!(Instant::now() < deadline, "the new master was not met");
            std::thread::sleep(Duration::from_millis(100));
        }
        self.wait_ready();
        new
    }

    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let auth = self
            .password
            .as_ref()
            .map_or(String::new(), |p| format!(":{p}@"));
        format!("redis+cluster://{auth}{}", hosts.join(","))
    }

    /// A connection to node `n`, logged in if the cluster has a password.
    pub fn resp(&self, n: usize) -> Resp {
        let mut r = self.nodes[n].resp();
        if let Some(p) = &self.password {
            assert_eq!(
                r.cmd(&["AUTH", p]).unwrap(),
                Reply::Status("OK".into()),
                "AUTH"
            );
        }
        r
    }

    pub fn dbsize(&self) -> i64 {
        (0..self.nodes.len())
            .map(|n| self.resp(n).int(&["DBSIZE"]))
            .sum()
    }

    fn id(&self, node: usize) -> String {
        match self.resp(node).cmd(&["CLUSTER", "MYID"]).unwrap() {
            Reply::Bulk(s) => s,
            r => panic!("CLUSTER MYID: {r:?}"),
        }
    }

    fn ok(&self, node: usize, args: &[&str]) {
        let r = self.resp(node).cmd(args).unwrap();
        assert_eq!(r, Reply::Status("OK".into()), "{args:?}");
    }

    /// The index of the node that serves `slot`.
    pub fn owner(&self, slot: u16) -> usize {
        let Reply::Array(ranges) = self.resp(0).cmd(&["CLUSTER", "SLOTS"]).unwrap() else {
            panic!("CLUSTER SLOTS")
        };
        for r in ranges {
            let Reply::Array(r) = r else { panic!("{r:?}") };
            let (Reply::Int(a), Reply::Int(b), Reply::Array(master)) = (&r[0], &r[1], &r[2]) else {
                panic!("{r:?}")
            };
            if (*a..=*b).contains(&i64::from(slot)) {
                let Reply::Int(port) = master[1] else {
                    panic!("{master:?}")
                };
                return self
                    .nodes
                    .iter()
                    .position(|n| i64::from(n.port) == port)
                    .unwrap();
            }
        }
        panic!("slot {slot} has no owner")
    }

    /// The first half of moving `slot` from node `from` to node `to` (what `redis-cli --cluster
    /// reshard` does): the slot marked migrating and importing, and its keys moved with
    /// MIGRATE. Clients asking `from` for them now get ASK.
    pub fn start_migration(&self, slot: u16, from: usize, to: usize) {
        let s = slot.to_string();
        self.ok(to, &["CLUSTER", "SETSLOT", &s, "IMPORTING", &self.id(from)]);
        self.ok(from, &["CLUSTER", "SETSLOT", &s, "MIGRATING", &self.id(to)]);
        let Reply::Array(keys) = self
            .resp(from)
            .cmd(&["CLUSTER", "GETKEYSINSLOT", &s, "1000"])
            .unwrap()
        else {
            panic!("GETKEYSINSLOT")
        };
        let port = self.nodes[to].port.to_string();
        for k in keys {
            let Reply::Bulk(k) = k else { panic!("{k:?}") };
            match &self.password {
                Some(p) => self.ok(
                    from,
                    &["MIGRATE", "127.0.0.1", &port, &k, "0", "5000", "AUTH", p],
                ),
                None => self.ok(from, &["MIGRATE", "127.0.0.1", &port, &k, "0", "5000"]),
            }
        }
    }

    /// The second half: every node told that `to` serves `slot`. Clients asking another
    /// node now get MOVED.
    pub fn finish_migration(&self, slot: u16, to: usize) {
        let (s, id) = (slot.to_string(), self.id(to));
        let mut order: Vec<usize> = (0..self.nodes.len()).collect();
        order.sort_by_key(|&n| n != to);
        for n in order {
            self.ok(n, &["CLUSTER", "SETSLOT", &s, "NODE", &id]);
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    Status(String),
    Error(String),
    Int(i64),
    Bulk(String),
    Nil,
    Array(Vec<Reply>),
}

pub struct Resp {
    w: TcpStream,
    r: BufReader<TcpStream>,
}

impl Resp {
    pub fn connect(port: u16) -> std::io::Result<Resp> {
        let s = TcpStream::connect(("127.0.0.1", port))?;
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        Ok(Resp {
            r: BufReader::new(s.try_clone()?),
            w: s,
        })
    }

    pub fn cmd(&mut self, args: &[&str]) -> std::io::Result<Reply> {
        let mut out = format!("*{}\r\n", args.len());
        for a in args {
            out.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        self.w.write_all(out.as_bytes())?;
        self.read()
    }

    fn read(&mut self) -> std::io::Result<Reply> {
        let mut line = String::new();
        self.r.read_line(&mut line)?;
        let body = line
            .get(1..line.len().saturating_sub(2))
            .unwrap_or("")
            .to_string();
        Ok(match line.as_bytes().first() {
            Some(b'+') => Reply::Status(body),
            Some(b'-') => Reply::Error(body),
            Some(b':') => Reply::Int(body.parse().unwrap()),
            Some(b'$') => {
                let n: i64 = body.parse().unwrap();
                if n < 0 {
                    Reply::Nil
                } else {
                    let mut buf = vec![0; n as usize + 2];
                    self.r.read_exact(&mut buf)?;
                    buf.truncate(n as usize);
                    Reply::Bulk(String::from_utf8(buf).unwrap())
                }
            }
            Some(b'*') => {
                let n: i64 = body.parse().unwrap();
                let mut v = Vec::new();
                for _ in 0..n.max(0) {
                    v.push(self.read()?);
                }
                Reply::Array(v)
            }
            _ => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!("bad reply {line:?}"),
                ))
            }
        })
    }

    pub fn int(&mut self, args: &[&str]) -> i64 {
        match self.cmd(args).unwrap() {
            Reply::Int(i) => i,
            r => panic!("{args:?}: {r:?}"),
        }
    }

    /// The server's TIME in microseconds since the Unix epoch.
    pub fn time_us(&mut self) -> u64 {
        match self.cmd(&["TIME"]).unwrap() {
            Reply::Array(v) => match (&v[0], &v[1]) {
                (Reply::Bulk(s), Reply::Bulk(u)) => {
                    s.parse::<u64>().unwrap() * 1_000_000 + u.parse::<u64>().unwrap()
                }
                r => panic!("{r:?}"),
            },
            r => panic!("{r:?}"),
        }
    }

    pub fn keys(&mut self) -> Vec<String> {
        match self.cmd(&["KEYS", "*"]).unwrap() {
            Reply::Array(v) => v
                .into_iter()
                .map(|r| match r {
                    Reply::Bulk(s) => s,
                    r => panic!("{r:?}"),
                })
                .collect(),
            r => panic!("{r:?}"),
        }
    }

    /// Deletes every key whose name starts with `prefix`; returns how many.
    pub fn del_prefix(&mut self, prefix: &str) -> usize {
        let keys: Vec<String> = self
            .keys()
            .into_iter()
            .filter(|k| k.starts_with(prefix))
            .collect();
        for k in &keys {
            self.int(&["DEL", k]);
        }
        keys.len()
    }

    /// A key's value (as Redis prints it) and its PEXPIRETIME.
    pub fn value(&mut self, key: &str) -> (Reply, i64) {
        let v = match self.cmd(&["TYPE", key]).unwrap() {
            Reply::Status(t) if t == "list" => self.cmd(&["LRANGE", key, "0", "-1"]).unwrap(),
            _ => self.cmd(&["GET", key]).unwrap(),
        };
        (v, self.int(&["PEXPIRETIME", key]))
    }
}
