//! A minimal ISO 9660 reader: the entries of an image's root directory, from the
//! primary volume descriptor and, when present, the Joliet supplementary descriptor
//! (UCS-2 big-endian names), and the bytes of a file there. Enough to see whether an
//! ISO carries a Windows answer file (`autounattend.xml`) in its root, as Windows Setup
//! looks for it, and to read what it says.
//!
//! Contract (ECMA-119 §8.4, §9.1; Joliet: escape sequences `%/@`, `%/C`, `%/E` at byte
//! 88 of a type-2 descriptor): descriptors start at sector 16 (2048-byte sectors) and
//! end at a type-255 terminator; the root directory record sits at byte 156 of a
//! descriptor (extent LBA: LE u32 at +2, length: LE u32 at +10; the same in every
//! directory record); a directory's records never cross a sector (a zero length byte
//! means "next sector"); names carry a `;1` version that is dropped, as is a trailing
//! `.`. A file is its one extent (no multi-extent files, no interleaving). Failure
//! modes: any I/O error or a malformed image is an `Err` with a short reason — never a
//! panic; reads are bounded (at most 64 descriptors, a root directory of at most 4 MiB,
//! a file of at most the caller's limit).

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

const SECTOR: u64 = 2048;
const MAX_DESCRIPTORS: u64 = 64;
const MAX_DIR: u32 = 4 << 20;

fn read_at(f: &mut File, offset: u64, len: usize) -> Result<Vec<u8>, String> {
    f.seek(SeekFrom::Start(offset)).map_err(|e| e.to_string())?;
    let mut buf = vec![0u8; len];
    f.read_exact(&mut buf).map_err(|e| format!("short read at {offset}: {e}"))?;
    Ok(buf)
}

fn le_u32(b: &[u8], at: usize) -> Option<u32> {
    b.get(at..at + 4).map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

/// One entry of the root directory.
struct Entry {
    name: String,
    lba: u32,
    len: u32,
}

/// The root directory's entries (files and directories, without `.` and `..`): Joliet
/// names when the image has a Joliet descriptor, else the primary names.
fn root_entries(f: &mut File) -> Result<Vec<Entry>, String> {
    let mut primary = None;
    let mut joliet = None;
    for i in 0..MAX_DESCRIPTORS {
        let d = read_at(f, (16 + i) * SECTOR, SECTOR as usize)?;
        if &d[1..6] != b"CD001" {
            return Err("not an ISO 9660 image (no CD001 descriptor)".into());
        }
        let root = (le_u32(&d, 156 + 2), le_u32(&d, 156 + 10));
        match d[0] {
            1 if primary.is_none() => primary = Some(root),
            2 if matches!(&d[88..91], b"%/@" | b"%/C" | b"%/E") => joliet = Some(root),
            255 => break,
            _ => {}
        }
    }
    let (ucs2, root) = match (joliet, primary) {
        (Some(r), _) => (true, r),
        (None, Some(r)) => (false, r),
        (None, None) => return Err("no primary volume descriptor".into()),
    };
    let (Some(lba), Some(len)) = root else { return Err("bad root directory record".into()) };
    if len > MAX_DIR {
        return Err(format!("root directory of {len} bytes is too large"));
    }
    let dir = read_at(f, u64::from(lba) * SECTOR, len as usize)?;
    let mut entries = Vec::new();
    let mut pos = 0usize;
    while pos < dir.len() {
        let rec_len = dir[pos] as usize;
        if rec_len == 0 {
            // Records never cross a sector: the rest of this one is padding.
            pos = (pos / SECTOR as usize + 1) * SECTOR as usize;
            continue;
        }
        let rec = dir.get(pos..pos + rec_len).ok_or("directory record runs past the directory")?;
        let name_len = *rec.get(32).ok_or("directory record too short")? as usize;
        let raw = rec.get(33..33 + name_len).ok_or("directory record name runs past the record")?;
        let (Some(lba), Some(len)) = (le_u32(rec, 2), le_u32(rec, 10)) else {
            return Err("directory record too short".into());
        };
        pos += rec_len;
        if raw == [0] || raw == [1] {
            continue; // `.` and `..`
        }
        let mut name = if ucs2 {
            let units: Vec<u16> = raw.chunks_exact(2).map(|c| u16::from_be_bytes([c[0], c[1]])).collect();
            String::from_utf16_lossy(&units)
        } else {
            String::from_utf8_lossy(raw).into_owned()
        };
        if let Some(i) = name.rfind(';') {
            name.truncate(i);
        }
        if name.ends_with('.') {
            name.pop();
        }
        entries.push(Entry { name, lba, len });
    }
    Ok(entries)
}

fn open(path: &Path) -> Result<File, String> {
    File::open(path).map_err(|e| format!("{}: {e}", path.display()))
}

/// The names of the root directory's entries (files and directories, without `.` and
/// `..`): Joliet names when the image has a Joliet descriptor, else the primary names.
#[cfg(test)]
fn root_names(path: &Path) -> Result<Vec<String>, String> {
    Ok(root_entries(&mut open(path)?)?.into_iter().map(|e| e.name).collect())
}

/// Whether the image's root directory holds `name` (compared case-insensitively).
#[cfg(test)]
fn has_root_file(path: &Path, name: &str) -> bool {
    root_names(path).is_ok_and(|names| names.iter().any(|n| n.eq_ignore_ascii_case(name)))
}

/// The bytes of the root directory's file `name` (compared case-insensitively), `None`
/// when there is none; a file over `limit` bytes is an `Err`.
pub fn read_root_file(path: &Path, name: &str, limit: u32) -> Result<Option<Vec<u8>>, String> {
    let mut f = open(path)?;
    let Some(e) = root_entries(&mut f)?.into_iter().find(|e| e.name.eq_ignore_ascii_case(name)) else {
        return Ok(None);
    };
    if e.len > limit {
        return Err(format!("{} is {} bytes, over the {limit} read here", e.name, e.len));
    }
    read_at(&mut f, u64::from(e.lba) * SECTOR, e.len as usize).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An ISO made by the real `genisoimage` from `files`; `None` when it is missing.
    fn genisoimage(dir: &Path, files: &[&str], args: &[&str]) -> Option<std::path::PathBuf> {
        let src = dir.join("src");
        std::fs::create_dir_all(src.join("sources")).unwrap();
        for f in files {
            std::fs::write(src.join(f), b"<unattend/>").unwrap();
        }
        let out = dir.join("x.iso");
        let status =
            std::process::Command::new("genisoimage").args(["-quiet", "-o"]).arg(&out).args(args).arg(&src).status();
        match status {
            Ok(s) if s.success() => Some(out),
            Ok(s) => panic!("genisoimage failed: {s}"),
            Err(e) => {
                eprintln!("skipping: genisoimage not available ({e})");
                None
            }
        }
    }

    #[test]
    fn joliet_names_of_a_genisoimage_iso_keep_case_and_length() {
        let t = tempfile::tempdir().unwrap();
        let Some(iso) = genisoimage(t.path(), &["AutoUnattend.xml", "setup.exe"], &["-J", "-R"]) else { return };
        let mut names = root_names(&iso).unwrap();
        names.sort();
        assert_eq!(names, ["AutoUnattend.xml", "setup.exe", "sources"]);
        assert!(has_root_file(&iso, "autounattend.xml"));
    }

    #[test]
    fn without_joliet_the_primary_names_are_read_and_truncated_names_do_not_match() {
        let t = tempfile::tempdir().unwrap();
        let Some(iso) = genisoimage(t.path(), &["autounattend.xml"], &[]) else { return };
        // ISO level 1: 8.3 upper-case names, as Windows Setup would not find them either.
        assert_eq!(root_names(&iso).unwrap(), ["AUTOUNAT.XML", "SOURCES"]);
        assert!(!has_root_file(&iso, "autounattend.xml"));
    }

    #[test]
    fn the_bytes_of_a_root_file_are_read_by_its_name_in_any_case_and_bounded() {
        let t = tempfile::tempdir().unwrap();
        let Some(iso) = genisoimage(t.path(), &["Autounattend.xml", "readme.txt"], &["-J", "-R"]) else { return };
        let text = read_root_file(&iso, "autounattend.xml", 1 << 20).unwrap();
        assert_eq!(text.as_deref(), Some(&b"<unattend/>"[..]));
        assert_eq!(read_root_file(&iso, "missing.xml", 1 << 20).unwrap(), None);
        assert!(read_root_file(&iso, "autounattend.xml", 4).unwrap_err().contains("over the 4"));
    }

    #[test]
    fn an_iso_without_the_file_and_garbage_are_no_answer_iso() {
        let t = tempfile::tempdir().unwrap();
        if let Some(iso) = genisoimage(t.path(), &["readme.txt"], &["-J", "-R"]) {
            assert!(!has_root_file(&iso, "autounattend.xml"));
        }
        let junk = t.path().join("junk.iso");
        std::fs::write(&junk, vec![7u8; 40 * 2048]).unwrap();
        assert!(root_names(&junk).is_err());
        std::fs::write(&junk, b"short").unwrap();
        assert!(root_names(&junk).is_err());
    }
}
