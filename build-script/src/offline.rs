//! Offline kernels: the modules and launchers of one `Build`, committed in
//! a folder of the crate with a manifest of what they were built from, so
//! the crate builds where no `rocmc` is installed (a user's machine, a
//! crates.io download, a Docker image).
//!
//! The manifest (`MANIFEST`, text) names the compiler that wrote the
//! kernels, a SHA-256 of each input (every kernel file, the tuning
//! database, the arguments: targets, tune values, options) and of each
//! output. A build uses the folder only when every input matches; each
//! output is checked before it is copied into `OUT_DIR`.

use crate::error::{io, REFRESH};
use crate::Error;
use sha2::{Digest, Sha256};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The manifest's file name inside the offline folder.
pub const MANIFEST: &str = "MANIFEST";

/// One input of a build and its digest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Input {
    /// What it is: `arguments …`, `kernel PATH`, `tuning PATH`.
    pub label: String,
    /// SHA-256, lowercase hex.
    pub digest: String,
}

/// SHA-256 of `bytes`, lowercase hex.
pub fn digest(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(64);
    for b in Sha256::digest(bytes) {
        // Writing into a String cannot fail.
        let _ = write!(s, "{b:02x}");
    }
    s
}

struct Manifest {
    compiler: String,
    inputs: Vec<Input>,
    /// (digest, file name)
    outputs: Vec<(String, String)>,
}

fn parse(text: &str, path: &Path) -> Result<Manifest, Error> {
    let mut m = Manifest {
        compiler: String::new(),
        inputs: Vec::new(),
        outputs: Vec::new(),
    };
    for (n, line) in text.lines().enumerate() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let bad = || Error::Offline {
            dir: path.parent().map(Path::to_path_buf).unwrap_or_default(),
            why: format!(
                "{}:{}: not a manifest line: {line:?}",
                path.display(),
                n + 1
            ),
        };
        let (kind, rest) = line.split_once(' ').ok_or_else(bad)?;
        match kind {
            "compiler" => m.compiler = rest.to_string(),
            "input" | "output" => {
                let (d, label) = rest.split_once(' ').ok_or_else(bad)?;
                if d.len() != 64 || !d.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return Err(bad());
                }
                if kind == "input" {
                    m.inputs.push(Input {
                        label: label.to_string(),
                        digest: d.to_string(),
                    });
                } else {
                    m.outputs.push((d.to_string(), label.to_string()));
                }
            }
            _ => return Err(bad()),
        }
    }
    Ok(m)
}

fn read_manifest(dir: &Path) -> Result<Manifest, Error> {
    let path = dir.join(MANIFEST);
    let text = std::fs::read_to_string(&path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => Error::Offline {
            dir: dir.to_path_buf(),
            why: format!("there are none ({} does not exist)", path.display()),
        },
        _ => io(&path)(e),
    })?;
    parse(&text, &path)
}

/// What differs between the inputs the folder was built from and `now`,
/// one line each; empty when they match.
fn differences(m: &Manifest, now: &[Input]) -> String {
    let mut why = String::new();
    for i in now {
        match m.inputs.iter().find(|o| o.label == i.label) {
            Some(o) if o.digest == i.digest => {}
            Some(_) => {
                let _ = writeln!(why, "  {} changed since they were written", i.label);
            }
            None => {
                let _ = writeln!(why, "  {} is not what they were built from", i.label);
            }
        }
    }
    for o in &m.inputs {
        if !now.iter().any(|i| i.label == o.label) {
            let _ = writeln!(why, "  they were built from {}", o.label);
        }
    }
    why
}

/// Why the folder does not hold the kernels of `inputs`, if it does not.
pub fn stale(dir: &Path, inputs: &[Input]) -> Option<String> {
    match read_manifest(dir) {
        Ok(m) => Some(differences(&m, inputs)).filter(|w| !w.is_empty()),
        Err(Error::Offline { why, .. }) => Some(why),
        Err(e) => Some(e.to_string()),
    }
}

/// Copies the folder's outputs into `out_dir` after checking that they
/// were built from `inputs` and are as written.
pub fn restore(dir: &Path, inputs: &[Input], out_dir: &Path) -> Result<Vec<PathBuf>, Error> {
    let m = read_manifest(dir)?;
    let why = differences(&m, inputs);
    if !why.is_empty() {
        return Err(Error::Offline {
            dir: dir.to_path_buf(),
            why: format!("they were written by {}, and\n{why}", m.compiler),
        });
    }
    let mut files = Vec::new();
    for (d, name) in &m.outputs {
        let from = dir.join(name);
        let bytes = std::fs::read(&from).map_err(io(&from))?;
        if digest(&bytes) != *d {
            return Err(Error::Offline {
                dir: dir.to_path_buf(),
                why: format!("  {name} was changed after it was written"),
            });
        }
        let to = out_dir.join(name);
        std::fs::write(&to, bytes).map_err(io(&to))?;
        files.push(to);
    }
    Ok(files)
}

/// Writes `files` (all in one folder) into `dir` with their manifest,
/// removing the outputs of the manifest they replace.
pub fn write(dir: &Path, compiler: &str, inputs: &[Input], files: &[PathBuf]) -> Result<(), Error> {
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    if let Ok(old) = read_manifest(dir) {
        for (_, name) in &old.outputs {
            let _ = std::fs::remove_file(dir.join(name));
        }
    }
    let mut text = format!(
        "# Offline kernels written by rocmc-build; do not edit.\n\
         # Used when no `rocmc` is installed and every input matches; {REFRESH}.\n\
         compiler {compiler}\n"
    );
    for i in inputs {
        let _ = writeln!(text, "input {} {}", i.digest, i.label);
    }
    for f in files {
        let name = f
            .file_name()
            .ok_or_else(|| Error::Usage(format!("{} names no file", f.display())))?;
        let bytes = std::fs::read(f).map_err(io(f))?;
        let to = dir.join(name);
        std::fs::write(&to, &bytes).map_err(io(&to))?;
        let _ = writeln!(text, "output {} {}", digest(&bytes), name.to_string_lossy());
    }
    // The manifest last, and whole: a folder whose copy was interrupted
    // keeps its old manifest, whose output digests then refuse it.
    let tmp = dir.join(format!("{MANIFEST}.tmp"));
    std::fs::write(&tmp, text).map_err(io(&tmp))?;
    let path = dir.join(MANIFEST);
    std::fs::rename(&tmp, &path).map_err(io(&path))
}
