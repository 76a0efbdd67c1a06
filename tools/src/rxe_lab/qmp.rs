//! Captures of the lab link through qemu's QMP socket: a `filter-dump` object on the lab
//! netdev records every frame in both directions (whole Ethernet frames, as the VM's NIC
//! and softverbs exchange them) into a pcap file until it is deleted.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Most lines read while waiting for one command's answer (QMP interleaves events).
const MAX_LINES_PER_REPLY: usize = 100;
/// Longest wait for qemu to answer.
const QMP_TIMEOUT: Duration = Duration::from_secs(10);

/// A connected QMP session.
pub struct Qmp {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

impl Qmp {
    /// Connects and leaves capabilities negotiation mode.
    pub fn connect(path: &Path) -> Result<Qmp, String> {
        let s = UnixStream::connect(path).map_err(|e| format!("QMP {}: {e}", path.display()))?;
        s.set_read_timeout(Some(QMP_TIMEOUT))
            .map_err(|e| format!("QMP: {e}"))?;
        let writer = s.try_clone().map_err(|e| format!("QMP: {e}"))?;
        let mut q = Qmp {
            reader: BufReader::new(s),
            writer,
        };
        let mut greeting = String::new();
        q.reader
            .read_line(&mut greeting)
            .map_err(|e| format!("QMP greeting: {e}"))?;
        if !greeting.contains("\"QMP\"") {
            return Err(format!("not a QMP greeting: {greeting:?}"));
        }
        q.execute(r#"{"execute":"qmp_capabilities"}"#)?;
        Ok(q)
    }

    /// Sends one command (JSON text) and waits for its `return`; `error` is `Err`.
    pub fn execute(&mut self, json: &str) -> Result<(), String> {
        self.writer
            .write_all(format!("{json}\n").as_bytes())
            .map_err(|e| format!("QMP write: {e}"))?;
        for _ in 0..MAX_LINES_PER_REPLY {
            let mut line = String::new();
            let n = self
                .reader
                .read_line(&mut line)
                .map_err(|e| format!("QMP read: {e}"))?;
            if n == 0 {
                return Err("QMP closed".into());
            }
            if line.contains("\"return\"") {
                return Ok(());
            }
            if line.contains("\"error\"") {
                return Err(format!("QMP {json}: {}", line.trim()));
            }
        }
        Err(format!("QMP {json}: no answer"))
    }
}

/// A running capture; [`Capture::stop`] closes the file.
pub struct Capture {
    qmp: Qmp,
    id: String,
    /// The pcap file.
    pub file: PathBuf,
}

fn json_str(s: &str) -> String {
    let escaped: String = s
        .chars()
        .flat_map(|c| match c {
            '"' => vec!['\\', '"'],
            '\\' => vec!['\\', '\\'],
            c => vec![c],
        })
        .collect();
    format!("\"{escaped}\"")
}

impl Capture {
    /// Starts recording netdev `netdev` into `file` (replaced if it exists).
    pub fn start(qmp_path: &Path, netdev: &str, id: &str, file: &Path) -> Result<Capture, String> {
        let _ = std::fs::remove_file(file);
        let mut qmp = Qmp::connect(qmp_path)?;
        let file_str = file
            .to_str()
            .ok_or_else(|| format!("capture path {} is not UTF-8", file.display()))?;
        qmp.execute(&format!(
            r#"{{"execute":"object-add","arguments":{{"qom-type":"filter-dump","id":{},"netdev":{},"file":{}}}}}"#,
            json_str(id),
            json_str(netdev),
            json_str(file_str)
        ))?;
        Ok(Capture {
            qmp,
            id: id.to_string(),
            file: file.to_path_buf(),
        })
    }

    /// Stops recording; the file is complete when this returns `Ok`.
    pub fn stop(mut self) -> Result<PathBuf, String> {
        self.qmp.execute(&format!(
            r#"{{"execute":"object-del","arguments":{{"id":{}}}}}"#,
            json_str(&self.id)
        ))?;
        Ok(self.file)
    }
}
