//! `scripts/fault_proxy.py` as a test fixture: an HTTP proxy in front of an
//! S3 API (moto) that drops or fails chosen requests, run with
//! `$PARQIVF_PYTHON`, stopped and its log returned by [`FaultProxy::stop`].

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};

/// A running fault proxy.
pub struct FaultProxy {
    child: Child,
    endpoint: String,
    log: std::thread::JoinHandle<String>,
}

impl FaultProxy {
    /// Start the proxy in front of `upstream` with the script's fault flags
    /// `faults` (e.g. `["--lose-response", "PUT .*/versions/"]`).
    pub fn start(python: &str, upstream: &str, faults: &[&str]) -> FaultProxy {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/fault_proxy.py");
        let mut child = Command::new(python)
            .arg(script)
            .args(["--upstream", upstream])
            .args(faults)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start scripts/fault_proxy.py");
        let mut first = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut first)
            .unwrap();
        let endpoint = first
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("fault_proxy.py said {first:?}"))
            .to_string();
        let mut stderr = child.stderr.take().unwrap();
        let log = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = stderr.read_to_string(&mut s);
            s
        });
        FaultProxy {
            child,
            endpoint,
            log,
        }
    }

    /// The URL to use as `AWS_ENDPOINT`.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Stop the proxy and return its log (one line per request).
    pub fn stop(mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.log.join().unwrap_or_default()
    }
}
