//! Hostile input: every file in tests/bad/ is one class of mistake. rocmc
//! must refuse it with exit code 2, a compiler-style message (snapshotted
//! exactly), no panic, and no output file.

use rocmc_tests::*;

#[test]
fn every_bad_kernel_gets_a_precise_error() {
    let dir = root().join("tests/bad");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    assert!(files.len() >= 30, "only {} bad inputs", files.len());
    let mut settings = insta::Settings::clone_current();
    settings.set_prepend_module_to_snapshot(false);
    settings.set_snapshot_path(root().join("tests/bad/snapshots"));
    settings.bind(|| {
        for f in &files {
            let name = f.file_name().unwrap().to_string_lossy().into_owned();
            let work = tempfile::tempdir().unwrap();
            std::fs::copy(f, work.path().join(&name)).unwrap();
            let out = rocmc(
                work.path(),
                &["build", "--mcpu", "gfx90a", "--emit", "llvm,hsaco", &name],
            );
            let err = text(&out.stderr);
            assert_eq!(
                out.status.code(),
                Some(2),
                "{name}: exit code {:?}\n{err}",
                out.status.code()
            );
            assert!(!err.contains("panicked"), "{name}: {err}");
            assert!(err.starts_with("error"), "{name}: {err}");
            assert!(
                err.contains(&format!("{name}:")),
                "{name}: the message does not name the file:\n{err}"
            );
            assert_eq!(
                files_in(work.path()),
                [name.as_str()],
                "{name}: output written"
            );
            insta::assert_snapshot!(name.trim_end_matches(".toml").to_string(), err);
        }
    });
}

#[test]
fn a_failed_build_keeps_the_previous_output() {
    let d = tempfile::tempdir().unwrap();
    let good = std::fs::read_to_string(example("vadd")).unwrap();
    std::fs::write(d.path().join("k.toml"), &good).unwrap();
    let out = rocmc(
        d.path(),
        &["build", "--mcpu", "gfx90a", "k.toml", "-o", "k.hsaco"],
    );
    assert!(out.status.success());
    let before = std::fs::read(d.path().join("k.hsaco")).unwrap();
    std::fs::write(
        d.path().join("k.toml"),
        good.replace("A[i] + B[i]", "A[i] + "),
    )
    .unwrap();
    let out = rocmc(
        d.path(),
        &["build", "--mcpu", "gfx90a", "k.toml", "-o", "k.hsaco"],
    );
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(std::fs::read(d.path().join("k.hsaco")).unwrap(), before);
    assert_eq!(
        files_in(d.path()),
        ["k.hsaco", "k.toml"],
        "no temporary file left behind"
    );
}

#[test]
fn an_unwritable_output_is_an_io_error() {
    let d = tempfile::tempdir().unwrap();
    let out = rocmc(
        d.path(),
        &[
            "build",
            "--mcpu",
            "gfx90a",
            &example("vadd").to_string_lossy(),
            "-o",
            "missing/dir/k.hsaco",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("missing/dir/k.hsaco"),
        "{}",
        text(&out.stderr)
    );
    assert!(files_in(d.path()).is_empty());
}
