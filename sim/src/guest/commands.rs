//! The commands a workflow runs over SSH, answered as a Debian 12 cloud guest or a PVE
//! node would.
//!
//! Contract: a command line is split at `&&`, `||` and `;` and run left to right with
//! shell short-circuiting; `sudo [-n]` is accepted (cloud users have NOPASSWD sudo).
//! Unknown commands exit 127 with bash's message, never hang. Node uploads (`tee PATH`,
//! `cat > PATH`, `install -m MODE /dev/stdin PATH`, then `mv`) only write under the
//! node's `dir` storage paths (see `node_cmd`).

use std::sync::Arc;

use tokio::time::Instant;

use super::CiOutcome;
use crate::sim::{Sim, lock};

/// What to do after answering.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Nothing.
    None,
    /// The guest reboots (connection drops).
    Reboot,
    /// The guest powers off.
    PowerOff,
    /// Answer `cloud-init status` when cloud-init has finished.
    WaitCloudInit {
        /// When.
        until: Instant,
        /// JSON format.
        json: bool,
        /// `--long`.
        long: bool,
    },
}

/// A command's result.
#[derive(Debug)]
pub struct Outcome {
    /// stdout.
    pub stdout: String,
    /// stderr.
    pub stderr: String,
    /// Exit code.
    pub code: u32,
    /// Follow-up.
    pub action: Action,
}

impl Outcome {
    pub(super) fn ok(stdout: impl Into<String>) -> Self {
        Outcome { stdout: stdout.into(), stderr: String::new(), code: 0, action: Action::None }
    }
    pub(super) fn fail(code: u32, stderr: impl Into<String>) -> Self {
        Outcome { stdout: String::new(), stderr: stderr.into(), code, action: Action::None }
    }
}

/// Split a shell line into (connector before, words) pieces; quotes are stripped.
pub(super) fn split_line(line: &str) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    let mut conn = String::new();
    let mut words: Vec<String> = Vec::new();
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    let mut in_word = false;
    let chars: Vec<char> = line.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if let Some(q) = quote {
            if c == q {
                quote = None;
            } else {
                cur.push(c);
            }
            i += 1;
            continue;
        }
        let two: String = chars[i..chars.len().min(i + 2)].iter().collect();
        if two == "&&" || two == "||" || c == ';' || c == '\n' {
            if in_word {
                words.push(std::mem::take(&mut cur));
                in_word = false;
            }
            out.push((std::mem::take(&mut conn), std::mem::take(&mut words)));
            conn = if c == ';' || c == '\n' { ";".into() } else { two.clone() };
            i += if c == ';' || c == '\n' { 1 } else { 2 };
            continue;
        }
        match c {
            '\'' | '"' => {
                quote = Some(c);
                in_word = true;
            }
            ' ' | '\t' => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            _ => {
                cur.push(c);
                in_word = true;
            }
        }
        i += 1;
    }
    if in_word {
        words.push(cur);
    }
    out.push((conn, words));
    out.into_iter().filter(|(_, w)| !w.is_empty()).collect()
}

/// Strip `sudo [-n] [-u root] [--]` and `env`; returns (words, elevated).
pub(super) fn strip_sudo(words: &[String]) -> (Vec<String>, bool) {
    let mut w: Vec<String> = words.to_vec();
    let mut sudo = false;
    if w.first().is_some_and(|x| x == "sudo") {
        sudo = true;
        w.remove(0);
        while let Some(f) = w.first() {
            if f == "-u" {
                w.drain(..2.min(w.len()));
            } else if f.starts_with('-') {
                w.remove(0);
            } else {
                break;
            }
        }
    }
    (w, sudo)
}

pub(super) fn run_line(line: &str, mut one: impl FnMut(&[String]) -> Outcome) -> Outcome {
    let mut last = Outcome::ok("");
    let mut stdout = String::new();
    let mut stderr = String::new();
    for (conn, words) in split_line(line) {
        let skip = (conn == "&&" && last.code != 0) || (conn == "||" && last.code == 0);
        if skip {
            continue;
        }
        last = one(&words);
        stdout.push_str(&last.stdout);
        stderr.push_str(&last.stderr);
        if !matches!(last.action, Action::None) {
            break;
        }
    }
    Outcome { stdout, stderr, code: last.code, action: last.action }
}

pub(super) fn not_found(cmd: &str) -> Outcome {
    Outcome::fail(127, format!("bash: line 1: {cmd}: command not found\n"))
}

/// `cloud-init status` of the current boot.
pub fn cloud_init_status(sim: &Arc<Sim>, vmid: u32, generation: u64, json: bool, long: bool) -> Outcome {
    let guests = lock(&sim.guests);
    let Some(g) = guests.get(&vmid).filter(|g| g.generation == generation) else {
        return Outcome::fail(255, "");
    };
    let finished = Instant::now() >= g.ci_done_at;
    let (out, code) = super::cloudinit::status(g.ci, finished, g.boot_unix, json, long);
    Outcome { stdout: out, stderr: String::new(), code, action: Action::None }
}

/// `grep [-F] [-e PATTERN]... [PATTERN] FILE` over `text`: fixed strings only
/// (what cradle sends); exit 0 with the matching lines, 1 when none match.
fn grep_fixed(args: &[&str], text: &str) -> Outcome {
    let mut patterns = Vec::new();
    let mut bare = Vec::new();
    let mut it = args[..args.len().saturating_sub(1)].iter();
    while let Some(a) = it.next() {
        match *a {
            "-e" => patterns.extend(it.next().copied()),
            "-F" => {}
            flag if flag.starts_with('-') => return Outcome::fail(2, format!("grep: unsupported option {flag}\n")),
            p => bare.push(p),
        }
    }
    if patterns.is_empty() {
        patterns.extend(bare.first().copied());
    }
    let hits: Vec<&str> = text.lines().filter(|l| patterns.iter().any(|p| l.contains(p))).collect();
    if hits.is_empty() {
        Outcome::fail(1, "")
    } else {
        Outcome::ok(hits.iter().map(|l| format!("{l}\n")).collect::<String>())
    }
}

/// Run a command line on a guest as `user`.
pub fn run_guest(sim: &Arc<Sim>, vmid: u32, generation: u64, user: &str, line: &str) -> Outcome {
    run_line(line, |words| guest_one(sim, vmid, generation, user, words))
}

fn guest_one(sim: &Arc<Sim>, vmid: u32, generation: u64, user: &str, words: &[String]) -> Outcome {
    let (w, sudo) = strip_sudo(words);
    let root = sudo || user == "root";
    let Some(cmd) = w.first().map(String::as_str) else { return Outcome::ok("") };
    let args: Vec<&str> = w[1..].iter().map(String::as_str).collect();
    let (boot_id, hostname, ci_done, ci, boot_unix, container) = {
        let guests = lock(&sim.guests);
        let Some(g) = guests.get(&vmid).filter(|g| g.generation == generation) else {
            return Outcome::fail(255, "Connection closed by remote host\n");
        };
        (g.boot_id.clone(), g.hostname.clone(), Instant::now() >= g.ci_done_at, g.ci, g.boot_unix, g.ident.container)
    };
    // A container has no cloud-init and runs the node's kernel.
    if container && (cmd == "cloud-init" || (cmd == "grep" && args.last() == Some(&"/var/log/cloud-init.log"))) {
        return not_found(cmd);
    }
    // What cloud-init installed stays on the disk, plus this boot's DHCP leases.
    let net = || super::net_view(sim, vmid);
    match cmd {
        "true" | ":" => Outcome::ok(""),
        "false" => Outcome::fail(1, ""),
        "exit" => Outcome::fail(args.first().and_then(|a| a.parse().ok()).unwrap_or(0), ""),
        "echo" => Outcome::ok(format!("{}\n", args.join(" "))),
        "hostname" => Outcome::ok(format!("{hostname}\n")),
        "whoami" => Outcome::ok(format!("{}\n", if sudo { "root" } else { user })),
        "id" if args == ["-u"] => Outcome::ok(if root { "0\n" } else { "1000\n" }),
        "id" if args == ["-un"] => Outcome::ok(format!("{}\n", if sudo { "root" } else { user })),
        "uname" if container => Outcome::ok(if args.contains(&"-r") { "6.14.8-2-pve\n" } else { "Linux\n" }),
        "uname" => Outcome::ok(if args.contains(&"-r") { "6.1.0-28-cloud-amd64\n" } else { "Linux\n" }),
        "python3" if args == ["--version"] || args == ["-V"] => Outcome::ok("Python 3.11.2\n"),
        "cat" => {
            let mut out = String::new();
            for a in &args {
                match *a {
                    "/proc/sys/kernel/random/boot_id" => out.push_str(&format!("{boot_id}\n")),
                    "/var/log/cloud-init.log" if !container => out.push_str(&super::cloudinit::log(ci, boot_unix)),
                    "/etc/hostname" => out.push_str(&format!("{hostname}\n")),
                    "/etc/os-release" | "/usr/lib/os-release" => out.push_str(super::lxc::OS_RELEASE),
                    path if net().files.contains_key(path) => {
                        out.push_str(net().files.get(path).map(String::as_str).unwrap_or_default())
                    }
                    // The image's own file: no resolvconf, no DHCP lease wrote it.
                    "/etc/resolv.conf" => {}
                    other => {
                        return Outcome {
                            stdout: out,
                            stderr: format!("cat: {other}: No such file or directory\n"),
                            code: 1,
                            action: Action::None,
                        };
                    }
                }
            }
            Outcome::ok(out)
        }
        "test" | "[" => {
            let args: Vec<&str> = args.iter().copied().filter(|a| *a != "]").collect();
            let exists = |p: &str| match p {
                "/proc/sys/kernel/random/boot_id"
                | "/etc/hostname"
                | "/usr/bin/python3"
                | "/etc/os-release"
                | "/etc/resolv.conf"
                | "/usr/sbin/ip"
                | "/"
                | "/tmp" => true,
                "/usr/bin/cloud-init" | "/etc/cloud" => !container,
                "/var/lib/cloud/instance/boot-finished" | "/run/cloud-init/result.json" => {
                    !container && ci_done && ci != CiOutcome::Disabled
                }
                _ => false,
            };
            let ok = match args.as_slice() {
                ["-e" | "-f" | "-d" | "-r" | "-s", p] => exists(p),
                ["-n", s] => !s.is_empty(),
                ["-z", s] => s.is_empty(),
                [a, "=" | "==", b] => a == b,
                [a, "!=", b] => a != b,
                [s] => !s.is_empty(),
                _ => false,
            };
            if ok { Outcome::ok("") } else { Outcome::fail(1, "") }
        }
        "ip" | "/usr/sbin/ip" | "/sbin/ip" => super::net_cmd::ip(&net(), &args),
        "cloud-init" if args.first() == Some(&"--version") => {
            Outcome::ok(format!("/usr/bin/cloud-init {}\n", super::cloudinit::VERSION))
        }
        "grep" if args.last() == Some(&"/var/log/cloud-init.log") => {
            grep_fixed(&args, &super::cloudinit::log(ci, boot_unix))
        }
        "cloud-init" if args.first() == Some(&"status") => {
            let json = args.windows(2).any(|p| p == ["--format", "json"]) || args.contains(&"--format=json");
            let long = args.contains(&"--long") || args.contains(&"-l");
            let wait = args.contains(&"--wait") || args.contains(&"-w");
            if wait && !ci_done {
                let until = lock(&sim.guests).get(&vmid).map(|g| g.ci_done_at).unwrap_or_else(Instant::now);
                return Outcome {
                    stdout: String::new(),
                    stderr: String::new(),
                    code: 0,
                    action: Action::WaitCloudInit { until, json, long },
                };
            }
            cloud_init_status(sim, vmid, generation, json, long)
        }
        "systemctl" if args == ["is-system-running"] => {
            if ci_done {
                Outcome::ok("running\n")
            } else {
                Outcome { stdout: "starting\n".into(), stderr: String::new(), code: 1, action: Action::None }
            }
        }
        "reboot" | "/sbin/reboot" | "/usr/sbin/reboot" | "systemctl" | "shutdown" | "poweroff" | "/sbin/poweroff" => {
            let reboot = matches!(cmd, "reboot" | "/sbin/reboot" | "/usr/sbin/reboot")
                || (cmd == "systemctl" && args.first() == Some(&"reboot"))
                || (cmd == "shutdown" && args.contains(&"-r"));
            let off = matches!(cmd, "poweroff" | "/sbin/poweroff")
                || (cmd == "systemctl" && args.first() == Some(&"poweroff"))
                || (cmd == "shutdown" && (args.contains(&"-h") || args.contains(&"-P")));
            if !reboot && !off {
                return not_found(&format!("{cmd} {}", args.join(" ")));
            }
            if !root {
                return Outcome::fail(1, "Call to Reboot failed: Interactive authentication required.\n");
            }
            Outcome {
                stdout: String::new(),
                stderr: String::new(),
                code: 0,
                action: if reboot { Action::Reboot } else { Action::PowerOff },
            }
        }
        other => not_found(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_lines_split_on_connectors_and_strip_quotes_and_sudo() {
        let parts = split_line("sudo -n tee '/var/lib/vz/snippets/a b.yaml' > /dev/null && echo \"ok; fine\"");
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0].1, vec!["sudo", "-n", "tee", "/var/lib/vz/snippets/a b.yaml", ">", "/dev/null"]);
        assert_eq!(parts[1].0, "&&");
        assert_eq!(parts[1].1, vec!["echo", "ok; fine"]);
        let (w, sudo) = strip_sudo(&parts[0].1);
        assert!(sudo);
        assert_eq!(w[0], "tee");
        assert!(super::super::node_cmd::node_reads_stdin("cat > /var/lib/vz/snippets/x"));
        assert!(!super::super::node_cmd::node_reads_stdin("cat /var/lib/vz/snippets/x"));
    }
}
