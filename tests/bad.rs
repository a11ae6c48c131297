//! Hostile input: every file in tests/bad/ is one class of mistake. rocmc
//! must refuse it with exit code 2, a compiler-style message (snapshotted
//! exactly), no panic, and no output file.

use crate::common::*;

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
    // The folder is named, not the temporary file rocmc writes through.
    assert_eq!(
        text(&out.stderr).trim_end(),
        "error: missing/dir/k.hsaco: the folder missing/dir does not exist (rocmc does not create folders)"
    );
    assert!(files_in(d.path()).is_empty());
}

/// `rocmc build --mcpu gfx90a vadd.toml -o OUT` in `dir`.
fn build_vadd(dir: &std::path::Path, out: &str) -> std::process::Output {
    let vadd = example("vadd");
    rocmc(
        dir,
        &[
            "build",
            "--mcpu",
            "gfx90a",
            &vadd.to_string_lossy(),
            "-o",
            out,
        ],
    )
}

/// `-o` naming a pipe (or a device such as /dev/null) writes into it: the
/// atomic rename used for files would replace it with a regular file,
/// which for /dev/null, as root, breaks the whole machine.
#[test]
fn an_output_that_is_a_pipe_is_written_into_not_replaced() {
    use std::os::unix::fs::FileTypeExt;
    let d = tempfile::tempdir().unwrap();
    let fifo = d.path().join("pipe");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let reader = std::thread::spawn({
        let fifo = fifo.clone();
        move || std::fs::read(fifo).unwrap()
    });
    let out = build_vadd(d.path(), "pipe");
    assert!(out.status.success(), "{}", text(&out.stderr));
    // Checked before joining: had the pipe been replaced, its reader would
    // wait for a writer forever.
    assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo());
    let got = reader.join().unwrap();
    assert_eq!(
        &got[..4],
        b"\x7fELF",
        "the code object came through the pipe"
    );
    assert_eq!(
        files_in(d.path()),
        ["pipe"],
        "no temporary file left behind"
    );
}

/// `-o` naming a symbolic link writes the file it points to; the link
/// stays a link.
#[test]
fn an_output_that_is_a_link_is_written_through() {
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir(d.path().join("real")).unwrap();
    std::fs::write(d.path().join("real/k.hsaco"), b"old").unwrap();
    std::os::unix::fs::symlink("real/k.hsaco", d.path().join("link.hsaco")).unwrap();
    let out = build_vadd(d.path(), "link.hsaco");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let link = std::fs::symlink_metadata(d.path().join("link.hsaco")).unwrap();
    assert!(link.file_type().is_symlink(), "the link was replaced");
    let got = std::fs::read(d.path().join("real/k.hsaco")).unwrap();
    assert_eq!(
        &got[..4],
        b"\x7fELF",
        "the linked file holds the code object"
    );
    assert_eq!(
        files_in(&d.path().join("real")),
        ["k.hsaco"],
        "no temporary file left behind"
    );
}

/// Mistakes on the command line: each gets one precise message naming the
/// flag and the offending value (snapshotted exactly), exit code 2, and
/// no output file.
#[test]
fn every_bad_command_line_gets_a_precise_error() {
    let mut settings = insta::Settings::clone_current();
    settings.set_prepend_module_to_snapshot(false);
    settings.set_snapshot_path(root().join("tests/bad/snapshots"));
    let work = tempfile::tempdir().unwrap();
    let d = work.path();
    for ex in ["vadd", "embedding", "softmax_tunable", "bias2d_vec"] {
        std::fs::copy(example(ex), d.join(format!("{ex}.toml"))).unwrap();
    }
    // Sizes without `max`: a fused loop counted in 32 bits.
    std::fs::copy(
        root().join("tests/regress/transpose4d_unbounded.toml"),
        d.join("tr4.toml"),
    )
    .unwrap();
    std::fs::write(d.join("f64s.npy"), npy_file("<f8", &[8], &[0; 64])).unwrap();
    std::fs::write(d.join("i32s.npy"), npy_file("<i4", &[8], &[0; 32])).unwrap();
    let ok = rocmc(
        d,
        &["build", "--mcpu", "gfx90a", "vadd.toml", "-o", "vadd.hsaco"],
    );
    assert!(ok.status.success());
    let before = files_in(d);
    let cases: &[(&str, &[&str])] = &[
        (
            "cli_sizes_past_a_launch_requirement",
            &[
                "run", "tr4.toml", "--size", "B=65536", "--size", "H=65536", "--size", "S=1",
                "--size", "D=32",
            ],
        ),
        (
            "cli_input_wrong_dtype",
            &[
                "run",
                "embedding.toml",
                "--size",
                "V=10",
                "--input",
                "ids=f64s.npy",
            ],
        ),
        (
            "cli_input_wrong_shape",
            &[
                "run",
                "embedding.toml",
                "--size",
                "V=10",
                "--size",
                "T=9",
                "--input",
                "ids=i32s.npy",
            ],
        ),
        (
            "cli_input_not_an_input",
            &[
                "run",
                "embedding.toml",
                "--size",
                "V=10",
                "--size",
                "T=9",
                "--input",
                "E=normal:0,1",
            ],
        ),
        (
            "cli_input_unknown_tensor",
            &[
                "run",
                "embedding.toml",
                "--size",
                "V=10",
                "--size",
                "T=9",
                "--input",
                "idx=normal:0,1",
            ],
        ),
        (
            "cli_input_bad_distribution",
            &[
                "run",
                "embedding.toml",
                "--size",
                "V=10",
                "--size",
                "T=9",
                "--input",
                "ids=poisson:3",
            ],
        ),
        (
            "cli_input_unknown_bound",
            &[
                "run",
                "embedding.toml",
                "--size",
                "V=10",
                "--size",
                "T=9",
                "--input",
                "ids=uniform:0,vocab",
            ],
        ),
        (
            "cli_input_outside_dtype",
            &[
                "run",
                "embedding.toml",
                "--size",
                "V=10",
                "--size",
                "T=9",
                "--input",
                "ids=uniform:0,1e12",
            ],
        ),
        (
            "cli_input_missing_file",
            &[
                "run",
                "embedding.toml",
                "--size",
                "V=10",
                "--input",
                "ids=missing.npy",
            ],
        ),
        (
            "cli_size_not_divisible",
            &[
                "run",
                "bias2d_vec.toml",
                "--size",
                "rows=3",
                "--size",
                "cols=1001",
            ],
        ),
        (
            "cli_tolerance_unknown_tensor",
            &[
                "run",
                "vadd.toml",
                "--size",
                "n=10",
                "--tolerance",
                "D=1e-3",
            ],
        ),
        (
            "cli_tolerance_negative",
            &["run", "vadd.toml", "--size", "n=10", "--tolerance", "C=-1"],
        ),
        (
            "cli_tune_not_a_candidate",
            &[
                "run",
                "softmax_tunable.toml",
                "--size",
                "rows=2",
                "--size",
                "cols=8",
                "--tune",
                "T=100",
            ],
        ),
        (
            "cli_tune_without_section",
            &["run", "vadd.toml", "--size", "n=10", "--tune", "T=64"],
        ),
        (
            "cli_code_object_with_input",
            &[
                "run",
                "vadd.hsaco",
                "--device",
                "amdgpu",
                "--size",
                "n=10",
                "--input",
                "A=const:1",
            ],
        ),
    ];
    settings.bind(|| {
        for (name, args) in cases {
            let out = rocmc(d, args);
            let err = text(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{name}: {err}");
            assert!(!err.contains("panicked"), "{name}: {err}");
            assert!(err.starts_with("error"), "{name}: {err}");
            assert_eq!(files_in(d), before, "{name}: a file was written");
            insta::assert_snapshot!(name.to_string(), err);
        }
    });
}
