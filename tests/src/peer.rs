//! A peer process for two-process tests: `rucx-test-peer`, driven by one command per line
//! on its stdin, answering one line per command on its stdout. It progresses its interface
//! continuously between commands (so RMA emulated over AM is served) unless paused.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::time::Duration;

/// The command channel to a running peer.
#[derive(Debug)]
pub struct Peer {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
}

impl Peer {
    /// Starts the peer binary at `exe`.
    pub fn spawn(exe: &str) -> Peer {
        let mut child = Command::new(exe)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {exe}: {e}"));
        let stdin = child.stdin.take().expect("piped");
        let stdout = child.stdout.take().expect("piped");
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Peer {
            child,
            stdin,
            lines,
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Sends a command without waiting for its answer.
    pub fn send(&mut self, cmd: &str) {
        writeln!(self.stdin, "{cmd}")
            .and_then(|()| self.stdin.flush())
            .expect("peer stdin");
    }

    /// Waits up to `timeout` for the next answer line.
    pub fn answer(&mut self, timeout: Duration) -> String {
        match self.lines.recv_timeout(timeout) {
            Ok(l) => l,
            Err(RecvTimeoutError::Timeout) => panic!("peer gave no answer within {timeout:?}"),
            Err(RecvTimeoutError::Disconnected) => panic!("peer exited"),
        }
    }

    /// Polls for an answer while the caller keeps working (returns `None` if none yet).
    pub fn try_answer(&mut self) -> Option<String> {
        self.lines.try_recv().ok()
    }

    /// Sends a command and waits (up to 30 s) for its answer.
    pub fn cmd(&mut self, cmd: &str) -> String {
        self.send(cmd);
        self.answer(Duration::from_secs(30))
    }

    /// Sends SIGKILL.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "quit");
        let _ = self.stdin.flush();
        for _ in 0..50 {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
