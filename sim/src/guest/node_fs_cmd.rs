//! Node commands about files and filesystems, in GNU coreutils / util-linux output
//! formats: `df -B1 --output=avail PATH`, `df -P -B1 PATH`, `findmnt -n -o FSTYPE
//! --target PATH`, `stat -c %s PATH`, `sha256sum PATH...`.
//!
//! Contract: paths follow `node_cmd`'s rules (allowed trees, symlinks inside the node;
//! others are "Permission denied"). `df` reports the filesystem holding PATH
//! (`/dev/mapper/pve-root` on `/`, or `tmpfs` on `/tmp`) with `nodefs`' numbers; other
//! `df` forms exit 1 with a usage hint. `sha256sum` reads the file in 1 MiB chunks.
//! Returns `None` for commands it does not handle.

use std::io::Read;
use std::sync::Arc;

use super::commands::Outcome;
use super::node_cmd::{deny, place};
use crate::nodefs::{Fs, io_text, space};
use crate::sim::Sim;

/// Run `cmd args` if it is one of this module's commands.
pub fn run(sim: &Arc<Sim>, node: &str, cmd: &str, args: &[&str]) -> Option<Outcome> {
    Some(match cmd {
        "df" => df(sim, node, args),
        "findmnt" => findmnt(sim, node, args),
        "stat" => stat(sim, node, args),
        "sha256sum" => sha256sum(sim, node, args),
        _ => return None,
    })
}

/// The node path `p` names (resolved) if allowed and existing, else the failure.
fn existing(sim: &Sim, node: &str, cmd: &str, p: &str) -> Result<(String, std::path::PathBuf), Outcome> {
    let Some((abs, real)) = place(sim, node, p, true) else { return Err(deny(cmd, p)) };
    if std::fs::symlink_metadata(&real).is_err() {
        return Err(Outcome::fail(
            1,
            match cmd {
                "stat" => format!("stat: cannot statx '{p}': No such file or directory\n"),
                "df" => format!("df: {p}: No such file or directory\n"),
                _ => format!("{cmd}: {p}: No such file or directory\n"),
            },
        ));
    }
    Ok((abs, real))
}

/// GNU df's table: columns separated by one space, each as wide as its widest cell
/// (at least the field's minimum), numbers right-aligned, the last column unpadded.
fn table(rows: &[Vec<String>], right: &[bool], min: &[usize]) -> String {
    let cols = right.len();
    let widths: Vec<usize> =
        (0..cols).map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0).max(min[c])).collect();
    let mut out = String::new();
    for r in rows {
        let mut line = String::new();
        for c in 0..cols {
            if c > 0 {
                line.push(' ');
            }
            let cell = &r[c];
            let pad = widths[c].saturating_sub(cell.chars().count());
            if right[c] {
                line.push_str(&" ".repeat(pad));
                line.push_str(cell);
            } else {
                line.push_str(cell);
                if c + 1 < cols {
                    line.push_str(&" ".repeat(pad));
                }
            }
        }
        out.push_str(&line);
        out.push('\n');
    }
    out
}

fn df(sim: &Sim, node: &str, args: &[&str]) -> Outcome {
    let paths: Vec<&str> = args.iter().copied().filter(|a| !a.starts_with('-')).collect();
    let flags: Vec<&str> = args.iter().copied().filter(|a| a.starts_with('-')).collect();
    let [p] = paths.as_slice() else {
        return Outcome::fail(1, "df: the simulated node answers 'df -B1 --output=avail PATH' and 'df -P -B1 PATH'\n");
    };
    let (abs, _) = match existing(sim, node, "df", p) {
        Ok(x) => x,
        Err(o) => return o,
    };
    let fs = Fs::of(&abs);
    let s = space(sim, node, fs);
    match flags.as_slice() {
        ["-B1", "--output=avail"] | ["--output=avail", "-B1"] => {
            table(&[vec!["Avail".into()], vec![s.avail.to_string()]], &[true], &[5]).into()
        }
        ["-P", "-B1"] | ["-B1", "-P"] => {
            // coreutils: Capacity = ceil(used * 100 / (used + avail)).
            let denom = s.used + s.avail;
            let pct = if denom == 0 { "-".to_string() } else { format!("{}%", (s.used * 100).div_ceil(denom)) };
            let rows = [
                ["Filesystem", "1-blocks", "Used", "Available", "Capacity", "Mounted on"].map(String::from).to_vec(),
                vec![
                    fs.source().into(),
                    s.total.to_string(),
                    s.used.to_string(),
                    s.avail.to_string(),
                    pct,
                    fs.target().into(),
                ],
            ];
            table(&rows, &[false, true, true, true, true, false], &[14, 5, 5, 5, 4, 0]).into()
        }
        _ => Outcome::fail(1, "df: the simulated node answers 'df -B1 --output=avail PATH' and 'df -P -B1 PATH'\n"),
    }
}

fn findmnt(sim: &Sim, node: &str, args: &[&str]) -> Outcome {
    let ok_flags = args.windows(2).any(|w| w == ["-o", "FSTYPE"]) && args.contains(&"-n");
    let target = args.iter().position(|a| *a == "--target").and_then(|i| args.get(i + 1)).copied();
    let (true, Some(p)) = (ok_flags, target) else {
        return Outcome::fail(1, "findmnt: the simulated node answers 'findmnt -n -o FSTYPE --target PATH'\n");
    };
    let Some((abs, _)) = place(sim, node, p, true) else { return deny("findmnt", p) };
    // findmnt --target walks up to the nearest mount point: any path has one.
    Outcome::ok(format!("{}\n", Fs::of(&abs).fstype()))
}

fn stat(sim: &Sim, node: &str, args: &[&str]) -> Outcome {
    let ["-c" | "--format", "%s", paths @ ..] = args else {
        return Outcome::fail(1, "stat: the simulated node answers 'stat -c %s PATH'\n");
    };
    let mut out = String::new();
    for p in paths {
        let real = match existing(sim, node, "stat", p) {
            Ok((_, r)) => r,
            Err(o) => return Outcome { stdout: out, ..o },
        };
        let len = std::fs::metadata(real).map(|m| m.len()).unwrap_or(0);
        out.push_str(&format!("{len}\n"));
    }
    Outcome::ok(out)
}

fn sha256sum(sim: &Sim, node: &str, args: &[&str]) -> Outcome {
    use sha2::Digest;
    let mut out = String::new();
    let mut err = String::new();
    for p in args.iter().filter(|a| !a.starts_with('-')) {
        let real = match existing(sim, node, "sha256sum", p) {
            Ok((_, r)) => r,
            Err(o) => {
                err.push_str(&o.stderr);
                continue;
            }
        };
        let hashed = std::fs::File::open(&real).and_then(|mut f| {
            let mut h = sha2::Sha256::new();
            let mut buf = vec![0u8; 1 << 20];
            loop {
                let n = f.read(&mut buf)?;
                if n == 0 {
                    return Ok(hex::encode(h.finalize()));
                }
                h.update(&buf[..n]);
            }
        });
        match hashed {
            Ok(hex) => out.push_str(&format!("{hex}  {p}\n")),
            Err(e) => err.push_str(&format!("sha256sum: {p}: {}\n", io_text(&e))),
        }
    }
    Outcome { stdout: out, code: u32::from(!err.is_empty()), stderr: err, action: super::commands::Action::None }
}

impl From<String> for Outcome {
    fn from(stdout: String) -> Self {
        Outcome::ok(stdout)
    }
}

#[cfg(test)]
mod tests {
    use super::table;

    #[test]
    fn df_tables_are_aligned_as_gnu_df_prints_them() {
        let t = table(&[vec!["Avail".into()], vec!["51680145408".into()]], &[true], &[5]);
        assert_eq!(t, "      Avail\n51680145408\n");
        let rows = [
            ["Filesystem", "1-blocks", "Used", "Available", "Capacity", "Mounted on"].map(String::from).to_vec(),
            ["/dev/vda", "270553174016", "45892603904", "51680145408", "48%", "/"].map(String::from).to_vec(),
        ];
        let t = table(&rows, &[false, true, true, true, true, false], &[14, 5, 5, 5, 4, 0]);
        // What GNU coreutils 9.1 `df -P -B1 /` printed on this machine.
        assert_eq!(
            t,
            "Filesystem         1-blocks        Used   Available Capacity Mounted on\n\
             /dev/vda       270553174016 45892603904 51680145408      48% /\n"
        );
    }
}
