//! Clang offload bundles: several code objects in one file, the form HIP's
//! module loader accepts for multi-GPU binaries.
//!
//! Layout (little-endian): the magic `__CLANG_OFFLOAD_BUNDLE__`, a u64 entry
//! count, then per entry a u64 offset, u64 size, u64 ID length and the ID;
//! entry data follows at 4096-byte-aligned offsets, as clang's HIP driver
//! writes them (`clang-offload-bundler -bundle-align=4096`). The first entry
//! is an empty host entry, as in hipcc's output.

use crate::codeobject::ReadError;
use std::ops::Range;

pub const MAGIC: &[u8; 24] = b"__CLANG_OFFLOAD_BUNDLE__";
pub const HOST_ENTRY: &str = "host-x86_64-unknown-linux-gnu-";
const ALIGN: u64 = 4096;

/// The entry ID hipcc gives a code object for `target_id` (`gfx90a:xnack-`).
pub fn entry_id(target_id: &str) -> String {
    format!("hipv4-amdgcn-amd-amdhsa--{target_id}")
}

pub fn is_bundle(bytes: &[u8]) -> bool {
    bytes.starts_with(MAGIC)
}

/// Packs `(target ID, code object)` pairs, in the given order, after the host entry.
pub fn write(entries: &[(String, Vec<u8>)]) -> Vec<u8> {
    let ids: Vec<String> = std::iter::once(HOST_ENTRY.to_string())
        .chain(entries.iter().map(|(t, _)| entry_id(t)))
        .collect();
    let sizes: Vec<u64> = std::iter::once(0)
        .chain(entries.iter().map(|(_, b)| b.len() as u64))
        .collect();
    let header_len: u64 = 24 + 8 + ids.iter().map(|id| 24 + id.len() as u64).sum::<u64>();
    let mut offsets = Vec::new();
    let mut at = header_len;
    for s in &sizes {
        at = at.div_ceil(ALIGN) * ALIGN;
        offsets.push(at);
        at += s;
    }
    let mut out = Vec::with_capacity(at as usize);
    out.extend_from_slice(MAGIC);
    out.extend((ids.len() as u64).to_le_bytes());
    for ((id, off), size) in ids.iter().zip(&offsets).zip(&sizes) {
        out.extend(off.to_le_bytes());
        out.extend(size.to_le_bytes());
        out.extend((id.len() as u64).to_le_bytes());
        out.extend(id.as_bytes());
    }
    for ((_, b), off) in entries.iter().zip(&offsets[1..]) {
        out.resize(*off as usize, 0);
        out.extend_from_slice(b);
    }
    out
}

/// One entry of a bundle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub id: String,
    pub range: Range<usize>,
}

impl Entry {
    /// The target ID of a `hipv4-amdgcn-amd-amdhsa--` entry.
    pub fn target_id(&self) -> Option<&str> {
        self.id.split_once("-amdgcn-amd-amdhsa--").map(|(_, t)| t)
    }
}

/// Lists the entries of a bundle, checking every offset against the file.
pub fn read(bytes: &[u8]) -> Result<Vec<Entry>, ReadError> {
    let corrupt = |m: String| ReadError::Corrupt(format!("offload bundle: {m}"));
    if !is_bundle(bytes) {
        return Err(ReadError::NotElf(
            "not an offload bundle (no __CLANG_OFFLOAD_BUNDLE__ magic)".into(),
        ));
    }
    let mut pos = 24usize;
    let u64_at = |pos: &mut usize, what: &str| -> Result<u64, ReadError> {
        let b = bytes
            .get(*pos..*pos + 8)
            .ok_or_else(|| corrupt(format!("truncated in the header ({what})")))?;
        *pos += 8;
        Ok(u64::from_le_bytes(b.try_into().expect("8 bytes")))
    };
    let n = u64_at(&mut pos, "entry count")?;
    if n > 4096 {
        return Err(corrupt(format!("{n} entries")));
    }
    let mut entries = Vec::new();
    for _ in 0..n {
        let off = u64_at(&mut pos, "offset")?;
        let size = u64_at(&mut pos, "size")?;
        let len = u64_at(&mut pos, "ID length")?;
        let id_end = usize::try_from(len)
            .ok()
            .and_then(|l| pos.checked_add(l))
            .ok_or_else(|| corrupt("ID length out of range".into()))?;
        let id = bytes
            .get(pos..id_end)
            .ok_or_else(|| corrupt("truncated entry ID".into()))?;
        let id =
            String::from_utf8(id.to_vec()).map_err(|_| corrupt("entry ID is not UTF-8".into()))?;
        pos = id_end;
        let start = usize::try_from(off).map_err(|_| corrupt("offset out of range".into()))?;
        let end = usize::try_from(size)
            .ok()
            .and_then(|s| start.checked_add(s))
            .filter(|e| *e <= bytes.len());
        let end = end.ok_or_else(|| corrupt(format!("entry `{id}` lies outside the file")))?;
        entries.push(Entry {
            id,
            range: start..end,
        });
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let b = write(&[
            ("gfx90a".into(), vec![1, 2, 3]),
            ("gfx1100".into(), vec![4; 5000]),
        ]);
        let e = read(&b).unwrap();
        assert_eq!(e.len(), 3);
        assert_eq!(e[0].id, HOST_ENTRY);
        assert_eq!(e[1].target_id(), Some("gfx90a"));
        assert_eq!(&b[e[1].range.clone()], &[1, 2, 3]);
        assert_eq!(e[1].range.start % 4096, 0);
        assert_eq!(b[e[2].range.clone()].len(), 5000);
    }

    #[test]
    fn truncations_are_errors() {
        let b = write(&[("gfx90a".into(), vec![7; 100])]);
        for cut in [10, 30, 40, 60, b.len() - 1] {
            assert!(read(&b[..cut]).is_err(), "cut at {cut}");
        }
    }
}
