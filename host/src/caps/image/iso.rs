//! A small ISO 9660 writer for the answer-file ISO of an unattended install
//! (Windows setup reads `autounattend.xml` from the root of any removable
//! medium): one root directory holding a few files, with a primary volume
//! descriptor (names upper-cased, `;1`) and a Joliet supplementary one
//! (UCS-2 names as given), as `genisoimage -J` lays them out (ECMA-119).
//!
//! Contract: the output is byte-for-byte the same for the same files (fixed
//! timestamps), so its digest names the volume and an unchanged answer file
//! is never uploaded twice. Refused: no files, more than 64, a name that is
//! not a plain file name (letters, digits, `.`, `_`, `-`; at most 64), a
//! name given twice (case-insensitively), a file over 1 GiB.

const SECTOR: usize = 2048;
/// System area, then PVD (16), Joliet SVD (17), terminator (18), four path
/// tables (19-22), the two root directories (23, 24), then the files.
const FIRST_FILE_SECTOR: usize = 25;

/// Why an ISO cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IsoError {
    /// No files, or too many.
    #[error("an answer ISO holds 1 to 64 files, not {0}")]
    Count(usize),
    /// A name that is not a plain file name.
    #[error("`{0}` is not a plain file name for an ISO (letters, digits, `.`, `_`, `-`, at most 64)")]
    Name(String),
    /// The same name twice.
    #[error("`{0}` is given twice")]
    Duplicate(String),
    /// Too large.
    #[error("`{0}` is larger than 1 GiB")]
    TooLarge(String),
}

fn both16(v: u16) -> [u8; 4] {
    let (l, b) = (v.to_le_bytes(), v.to_be_bytes());
    [l[0], l[1], b[0], b[1]]
}

fn both32(v: u32) -> [u8; 8] {
    let (l, b) = (v.to_le_bytes(), v.to_be_bytes());
    [l[0], l[1], l[2], l[3], b[0], b[1], b[2], b[3]]
}

/// 2000-01-01 00:00:00 UTC as a directory record date.
const RECORD_DATE: [u8; 7] = [100, 1, 1, 0, 0, 0, 0];
/// The same as a volume descriptor date.
const VOLUME_DATE: &[u8; 17] = b"2000010100000000\0";

fn dir_record(extent: u32, len: u32, dir: bool, name: &[u8]) -> Vec<u8> {
    let mut r = vec![0u8; 33];
    r[1] = 0;
    r[2..10].copy_from_slice(&both32(extent));
    r[10..18].copy_from_slice(&both32(len));
    r[18..25].copy_from_slice(&RECORD_DATE);
    r[25] = if dir { 2 } else { 0 };
    r[28..32].copy_from_slice(&both16(1));
    r[32] = name.len() as u8;
    r.extend_from_slice(name);
    if r.len() % 2 == 1 {
        r.push(0);
    }
    r[0] = r.len() as u8;
    r
}

fn ucs2(s: &str) -> Vec<u8> {
    s.encode_utf16().flat_map(u16::to_be_bytes).collect()
}

/// `text` padded with spaces (as UCS-2 when `joliet`) to `len` bytes.
fn padded(text: &str, len: usize, joliet: bool) -> Vec<u8> {
    let mut out = if joliet { ucs2(text) } else { text.as_bytes().to_vec() };
    out.truncate(len);
    while out.len() < len {
        if joliet && out.len() + 1 < len {
            out.extend_from_slice(&[0, b' ']);
        } else {
            out.push(b' ');
        }
    }
    out
}

fn descriptor(joliet: bool, volume: &str, total: u32, path_table: (u32, u32, u32), root: u32) -> Vec<u8> {
    let (size, l_table, m_table) = path_table;
    let mut d = vec![0u8; SECTOR];
    d[0] = if joliet { 2 } else { 1 };
    d[1..6].copy_from_slice(b"CD001");
    d[6] = 1;
    d[8..40].copy_from_slice(&padded("", 32, joliet));
    d[40..72].copy_from_slice(&padded(volume, 32, joliet));
    d[80..88].copy_from_slice(&both32(total));
    if joliet {
        // UCS-2 level 3.
        d[88..91].copy_from_slice(b"%/E");
    }
    d[120..124].copy_from_slice(&both16(1));
    d[124..128].copy_from_slice(&both16(1));
    d[128..132].copy_from_slice(&both16(SECTOR as u16));
    d[132..140].copy_from_slice(&both32(size));
    d[140..144].copy_from_slice(&l_table.to_le_bytes());
    d[148..152].copy_from_slice(&m_table.to_be_bytes());
    d[156..190].copy_from_slice(&dir_record(root, SECTOR as u32, true, &[0]));
    for (at, len) in [(190, 128), (318, 128), (446, 128), (574, 128), (702, 37), (739, 37), (776, 37)] {
        d[at..at + len].copy_from_slice(&padded("", len, joliet));
    }
    for at in [813, 830, 864] {
        d[at..at + 17].copy_from_slice(VOLUME_DATE);
    }
    d[847..864].copy_from_slice(b"0000000000000000\0");
    d[881] = 1;
    d
}

fn path_table(root: u32, big_endian: bool) -> Vec<u8> {
    let mut t = vec![1u8, 0];
    t.extend_from_slice(&if big_endian { root.to_be_bytes() } else { root.to_le_bytes() });
    t.extend_from_slice(&if big_endian { 1u16.to_be_bytes() } else { 1u16.to_le_bytes() });
    t.extend_from_slice(&[0, 0]);
    t
}

fn check(files: &[(String, Vec<u8>)]) -> Result<(), IsoError> {
    if files.is_empty() || files.len() > 64 {
        return Err(IsoError::Count(files.len()));
    }
    let mut seen = std::collections::BTreeSet::new();
    for (name, data) in files {
        let plain = !name.is_empty()
            && name.len() <= 64
            && !name.starts_with('.')
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
        if !plain {
            return Err(IsoError::Name(name.clone()));
        }
        if !seen.insert(name.to_ascii_uppercase()) {
            return Err(IsoError::Duplicate(name.clone()));
        }
        if data.len() > 1 << 30 {
            return Err(IsoError::TooLarge(name.clone()));
        }
    }
    Ok(())
}

/// The ISO image of `files` (name, content) with volume label `volume`.
pub fn build(volume: &str, files: &[(String, Vec<u8>)]) -> Result<Vec<u8>, IsoError> {
    check(files)?;
    let mut sorted: Vec<&(String, Vec<u8>)> = files.iter().collect();
    sorted.sort_by_key(|(n, _)| n.to_ascii_uppercase());
    let mut extents = Vec::new();
    let mut next = FIRST_FILE_SECTOR;
    for (_, data) in &sorted {
        extents.push(next as u32);
        next += data.len().div_ceil(SECTOR).max(1);
    }
    let total = next as u32;
    let root_dir = |joliet: bool, at: u32| -> Vec<u8> {
        let mut d = dir_record(at, SECTOR as u32, true, &[0]);
        d.extend(dir_record(at, SECTOR as u32, true, &[1]));
        for ((name, data), extent) in sorted.iter().zip(&extents) {
            let id = if joliet { ucs2(name) } else { format!("{};1", name.to_ascii_uppercase()).into_bytes() };
            d.extend(dir_record(*extent, data.len() as u32, false, &id));
        }
        d.resize(SECTOR, 0);
        d
    };
    let label: String =
        volume.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '_').take(32).collect::<String>().to_uppercase();
    let mut out = vec![0u8; 16 * SECTOR];
    out.extend(descriptor(false, &label, total, (10, 19, 20), 23));
    out.extend(descriptor(true, &label, total, (10, 21, 22), 24));
    let mut term = vec![0u8; SECTOR];
    term[0] = 255;
    term[1..6].copy_from_slice(b"CD001");
    term[6] = 1;
    out.extend(term);
    for (root, be) in [(23, false), (23, true), (24, false), (24, true)] {
        let mut t = path_table(root, be);
        t.resize(SECTOR, 0);
        out.extend(t);
    }
    out.extend(root_dir(false, 23));
    out.extend(root_dir(true, 24));
    for (_, data) in &sorted {
        let start = out.len();
        out.extend_from_slice(data);
        out.resize(start + data.len().div_ceil(SECTOR).max(1) * SECTOR, 0);
    }
    debug_assert_eq!(out.len(), total as usize * SECTOR);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files() -> Vec<(String, Vec<u8>)> {
        vec![
            ("autounattend.xml".into(), b"<unattend>win</unattend>\n".to_vec()),
            ("setup.ps1".into(), vec![b'x'; 5000]),
        ]
    }

    #[test]
    fn the_same_files_give_the_same_bytes() {
        assert_eq!(build("cidata", &files()).expect("iso"), build("cidata", &files()).expect("iso"));
    }

    #[test]
    fn bad_names_counts_and_duplicates_are_refused() {
        assert_eq!(build("x", &[]), Err(IsoError::Count(0)));
        for bad in ["a b", "../x", ".hidden", "x/y"] {
            assert!(matches!(build("x", &[(bad.into(), vec![])]), Err(IsoError::Name(_))), "{bad}");
        }
        let dup = vec![("a.xml".into(), vec![]), ("A.XML".into(), vec![])];
        assert!(matches!(build("x", &dup), Err(IsoError::Duplicate(_))));
    }

    /// The real `isoinfo` (Debian's genisoimage package) lists and extracts
    /// the files under their Joliet and ISO 9660 names.
    #[test]
    fn isoinfo_reads_the_files_back_by_their_joliet_and_iso_names() {
        if std::process::Command::new("isoinfo").arg("-version").output().is_err() {
            eprintln!("isoinfo is not installed (Debian: genisoimage); skipping the cross-check");
            return;
        }
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("answer.iso");
        std::fs::write(&path, build("cradle_answer", &files()).expect("iso")).expect("write");
        let run = |args: &[&str]| {
            let out = std::process::Command::new("isoinfo").arg("-i").arg(&path).args(args).output().expect("isoinfo");
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            out.stdout
        };
        let listing = String::from_utf8_lossy(&run(&["-J", "-l"])).into_owned();
        assert!(listing.contains("autounattend.xml") && listing.contains("setup.ps1"), "{listing}");
        assert_eq!(run(&["-J", "-x", "/autounattend.xml"]), b"<unattend>win</unattend>\n");
        assert_eq!(run(&["-x", "/AUTOUNATTEND.XML;1"]), b"<unattend>win</unattend>\n");
        assert_eq!(run(&["-J", "-x", "/setup.ps1"]), vec![b'x'; 5000]);
        let pvd = String::from_utf8_lossy(&run(&["-d"])).into_owned();
        assert!(pvd.contains("CRADLE_ANSWER"), "{pvd}");
    }
}
