//! A running lab as `lab.sh up` describes it in `<run dir>/lab.env`, the ssh command into
//! its guest, and a guest TCP server started behind an ssh forward. (The bounded wait for a
//! case's programs is in watchdog.rs.)

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::line_tap::{tap_lines, wait_for_line};

/// What the script of [`LabEnv::start_tcp_server`] prints once its program listens.
const TCP_LISTENING: &str = "tcp-listening";
/// Longest wait for a guest TCP server to listen.
const TCP_LISTEN_WAIT: Duration = Duration::from_secs(40);

/// Default cache root of the lab (image and run state), outside any clone.
pub const DEFAULT_CACHE: &str = "/var/cache/softverbs/rxe-lab";

/// The run directory: `SOFTVERBS_LAB_RUN`, else `<SOFTVERBS_LAB_CACHE or default>/run`.
pub fn run_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("SOFTVERBS_LAB_RUN") {
        return PathBuf::from(dir);
    }
    let cache = std::env::var_os("SOFTVERBS_LAB_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_CACHE));
    cache.join("run")
}

/// A TCP port on 127.0.0.1 that nobody holds now: the host end of an ssh forward or a
/// side channel of a case.
pub fn free_local_port() -> Result<u16, String> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    Ok(l.local_addr().map_err(|e| e.to_string())?.port())
}

/// Settings of a running lab.
#[derive(Debug, Clone)]
pub struct LabEnv {
    /// softverbs' address on the lab link.
    pub host_ip: Ipv4Addr,
    /// The guest rxe's address.
    pub guest_ip: Ipv4Addr,
    /// Where softverbs receives the link's frames.
    pub frames_local: SocketAddr,
    /// Where qemu receives them.
    pub frames_peer: SocketAddr,
    /// MTU of the guest's lab NIC (and of softverbs' netdev).
    pub mtu: u32,
    /// Port of the guest's sshd on 127.0.0.1.
    pub ssh_port: u16,
    /// Private key of the guest's root.
    pub ssh_key: PathBuf,
    /// qemu's QMP socket.
    pub qmp: PathBuf,
    /// The run directory (captures and results go under it).
    pub run: PathBuf,
}

impl LabEnv {
    /// Reads `<run dir>/lab.env`; `Err` says why no lab is usable.
    pub fn load() -> Result<LabEnv, String> {
        let path = run_dir().join("lab.env");
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("no lab is up ({}: {e})", path.display()))?;
        let vars: HashMap<&str, &str> = text
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.trim(), v.trim()))
            .collect();
        let get = |k: &str| {
            vars.get(k)
                .copied()
                .ok_or_else(|| format!("{} lacks {k}", path.display()))
        };
        let bad = |k: &str| format!("{} has a bad {k}", path.display());
        let (local, peer) = get("SOFTVERBS_LAB_LINK")?
            .split_once('/')
            .ok_or_else(|| bad("SOFTVERBS_LAB_LINK"))?;
        Ok(LabEnv {
            host_ip: get("SOFTVERBS_LAB_HOST_IP")?
                .parse()
                .map_err(|_| bad("SOFTVERBS_LAB_HOST_IP"))?,
            guest_ip: get("SOFTVERBS_LAB_GUEST_IP")?
                .parse()
                .map_err(|_| bad("SOFTVERBS_LAB_GUEST_IP"))?,
            frames_local: local.parse().map_err(|_| bad("SOFTVERBS_LAB_LINK"))?,
            frames_peer: peer.parse().map_err(|_| bad("SOFTVERBS_LAB_LINK"))?,
            mtu: get("SOFTVERBS_LAB_MTU")?
                .parse()
                .map_err(|_| bad("SOFTVERBS_LAB_MTU"))?,
            ssh_port: get("SOFTVERBS_LAB_SSH_PORT")?
                .parse()
                .map_err(|_| bad("SOFTVERBS_LAB_SSH_PORT"))?,
            ssh_key: PathBuf::from(get("SOFTVERBS_LAB_SSH_KEY")?),
            qmp: PathBuf::from(get("SOFTVERBS_LAB_QMP")?),
            run: PathBuf::from(get("SOFTVERBS_LAB_RUN")?),
        })
    }

    /// The `SOFTVERBS_DEVICES` entry of softverbs' device on the lab link.
    pub fn device_spec(&self, name: &str) -> String {
        format!(
            "{name}={}@{}/{}/{}",
            self.host_ip, self.frames_local, self.frames_peer, self.mtu
        )
    }

    /// `ssh` into the guest as root with `extra` options (port forwards) before the host;
    /// the caller appends the remote command.
    pub fn ssh(&self, extra: &[String]) -> Command {
        let mut c = Command::new("ssh");
        c.arg("-i")
            .arg(&self.ssh_key)
            .args(["-p", &self.ssh_port.to_string()])
            .args([
                "-o",
                "StrictHostKeyChecking=no",
                "-o",
                "UserKnownHostsFile=/dev/null",
                "-o",
                "LogLevel=ERROR",
                "-o",
                "BatchMode=yes",
                "-o",
                "ConnectTimeout=10",
                "-o",
                "ExitOnForwardFailure=yes",
            ])
            .args(extra)
            .arg("root@127.0.0.1");
        c
    }

    /// Starts `script` in the guest over ssh with `extra` options (port forwards), no input,
    /// its stdout and stderr piped for the caller to read.
    pub fn spawn_guest(&self, extra: &[String], script: &str) -> Result<Child, String> {
        self.ssh(extra)
            .arg(script)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("ssh: {e}"))
    }

    /// Runs `cmd` in the guest behind an ssh forward of the host's `local_port` to the
    /// guest's `guest_port`, and returns once a TCP listener on `guest_port` shows in the
    /// guest: the ssh child and its whole output. Past [`TCP_LISTEN_WAIT`] the child is
    /// killed and the error says that `what` did not listen.
    pub fn start_tcp_server(
        &self,
        cmd: &str,
        guest_port: u16,
        local_port: u16,
        what: &str,
    ) -> Result<(Child, JoinHandle<String>), String> {
        let script = format!(
            "{cmd} 2>&1 & for i in $(seq 300); do ss -ltn | grep -q ':{guest_port} ' && echo {TCP_LISTENING} && break; sleep 0.1; done; wait"
        );
        let forward = format!("127.0.0.1:{local_port}:127.0.0.1:{guest_port}");
        let mut guest = self.spawn_guest(&["-L".into(), forward], &script)?;
        let stdout = guest.stdout.take().ok_or("no guest stdout")?;
        let (lines, all) = tap_lines(stdout);
        if !wait_for_line(&lines, TCP_LISTENING, Instant::now() + TCP_LISTEN_WAIT) {
            let _ = guest.kill();
            let _ = guest.wait();
            return Err(format!("{what} did not listen"));
        }
        Ok((guest, all))
    }
}
