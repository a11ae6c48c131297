//! `rocmc build --emit header`: the C header of a module. A C program
//! compiled by clang-22 calls the x86-64 shared objects through it and
//! checks the results itself; the GPU headers compile as strict C and
//! their argument blocks sit at the offsets LLVM's code object metadata
//! gives (read by llvm-readobj-22).

use crate::common::*;
use std::path::Path;
use std::process::Command;

fn build(dir: &Path, name: &str, mcpu: &str, emit: &str, out: &str) {
    let ex = example(name).to_string_lossy().into_owned();
    let o = rocmc(
        dir,
        &[
            "build", "-q", "--mcpu", mcpu, "--emit", emit, &ex, "-o", out,
        ],
    );
    assert!(o.status.success(), "{name} {mcpu}: {}", text(&o.stderr));
}

fn clang(dir: &Path, args: &[&str]) {
    let o = Command::new("clang-22")
        .current_dir(dir)
        .args(["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic"])
        .args(args)
        .output()
        .expect("clang-22 (scripts/install-deps.sh installs it)");
    assert!(
        o.status.success(),
        "clang-22 {args:?}:\n{}",
        text(&o.stderr)
    );
}

const MAIN: &str = r#"
#include "bias2d_vec.h"
#include "histogram.h"
#include <stdio.h>
#include <math.h>

int main(void) {
    enum { R = 5, C = 12 };
    float X[R * C], bias[C], Y[R * C];
    for (int i = 0; i < R * C; i++) { X[i] = (float)(i % 7) - 3.0f; Y[i] = -1.0f; }
    for (int c = 0; c < C; c++) bias[c] = 0.25f * (float)c;
    if (bias2d_vec_run(X, bias, Y, R, C, 1.5f) != 0) { puts("refused a valid launch"); return 1; }
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) {
            float want = X[r * C + c] * 1.5f + bias[c];
            if (fabsf(Y[r * C + c] - want) > 1e-5f) { printf("Y[%d][%d] = %f, not %f\n", r, c, Y[r * C + c], want); return 1; }
        }
    /* cols = 13 breaks `divisible = { cols = 4 }`: refused, nothing written. */
    Y[0] = -7.0f;
    if (bias2d_vec_run(X, bias, Y, 1, 13, 1.5f) != -1 || Y[0] != -7.0f) { puts("cols = 13 ran"); return 1; }
    if (BIAS2D_VEC_COLS_DIVISOR != 4 || bias2d_vec_grid_x(R, 1000) != 4) { puts("geometry"); return 1; }

    enum { N = 100000 };
    static uint8_t bytes[N];
    int32_t H[256], want[256] = {0};
    uint32_t s = 12345;
    for (int i = 0; i < N; i++) { s = s * 1103515245u + 12345u; bytes[i] = (uint8_t)(s >> 16); want[bytes[i]]++; }
    for (int b = 0; b < 256; b++) H[b] = 99;
    if (histogram_init_run(H, N) != 0 || histogram_run(bytes, H, N) != 0) { puts("histogram refused"); return 1; }
    for (int b = 0; b < 256; b++)
        if (H[b] != want[b]) { printf("H[%d] = %d, not %d\n", b, H[b], want[b]); return 1; }
    puts("ok");
    return 0;
}
"#;

#[test]
fn c_calls_the_cpu_objects_through_their_headers() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path();
    build(p, "bias2d_vec", "x86-64", "so,header", "libbias2d_vec.so");
    build(p, "histogram", "x86-64", "so,header", "libhistogram.so");
    std::fs::rename(p.join("libbias2d_vec.h"), p.join("bias2d_vec.h")).unwrap();
    std::fs::rename(p.join("libhistogram.h"), p.join("histogram.h")).unwrap();
    std::fs::write(p.join("main.c"), MAIN).unwrap();
    clang(
        p,
        &[
            "main.c",
            "-o",
            "main",
            "-L.",
            "-lbias2d_vec",
            "-lhistogram",
            "-lm",
            "-Wl,-rpath,$ORIGIN",
        ],
    );
    let o = Command::new(p.join("main")).output().unwrap();
    assert_eq!(text(&o.stdout).trim(), "ok", "{}", text(&o.stderr));
}

#[test]
fn gpu_headers_compile_and_lay_out_the_argument_block_as_llvm_does() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path();
    build(p, "bias2d_vec", "gfx90a", "hsaco,header", "bv.hsaco");
    build(p, "embedding", "sm_90", "header", "emb.h");
    // Offsets of the kernel arguments in LLVM's own metadata.
    let notes = Command::new("llvm-readobj-22")
        .args(["--notes", "bv.hsaco"])
        .current_dir(p)
        .output()
        .unwrap();
    let notes = text(&notes.stdout);
    let mut offsets = Vec::new();
    let mut name = None;
    for l in notes.lines() {
        let l = l.trim().trim_start_matches("- ");
        if let Some(n) = l.strip_prefix(".name:") {
            name = Some(n.trim().to_string());
        } else if let Some(o) = l.strip_prefix(".offset:") {
            offsets.push((name.take().unwrap(), o.trim().to_string()));
        }
    }
    assert_eq!(offsets.len(), 6, "{notes}");
    let mut c = String::from("#include <stddef.h>\n#include \"bv.h\"\n#include \"emb.h\"\n");
    for (n, o) in &offsets {
        c.push_str(&format!(
            "_Static_assert(offsetof(struct bias2d_vec_args, {n}) == {o}, \"{n}\");\n"
        ));
    }
    c.push_str("int main(void) { struct embedding_args a; (void)a; return (int)embedding_grid_x(4, 10); }\n");
    std::fs::write(p.join("t.c"), c).unwrap();
    clang(p, &["-c", "t.c", "-o", "t.o"]);
    let h = std::fs::read_to_string(p.join("emb.h")).unwrap();
    assert!(
        h.contains("const uint16_t *table"),
        "f16 travels as bits:\n{h}"
    );
    assert!(h.contains("const int32_t *ids"), "{h}");
}

/// A kernel with LDS sized at launch: its header computes the bytes a
/// launch needs from the sizes, as the launch document does.
#[test]
fn headers_give_the_lds_a_launch_needs() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path();
    let file = root()
        .join("tests/bounded/softmax_row_lds.toml")
        .to_string_lossy()
        .into_owned();
    for (mcpu, out) in [("gfx942", "amd.h"), ("sm_90", "nv.h")] {
        let o = rocmc(
            p,
            &[
                "build", "-q", "--mcpu", mcpu, "--emit", "header", &file, "-o", out,
            ],
        );
        assert!(o.status.success(), "{}", text(&o.stderr));
    }
    // AMD: the row after the static LDS, 128 threads' chunks of 4 bytes.
    std::fs::write(
        p.join("amd.c"),
        "#include <stdio.h>\n#include \"amd.h\"\nint main(void) { printf(\"%lld %lld\\n\", \
         (long long)softmax_row_lds_shared_bytes(8, 1000), (long long)softmax_row_lds_shared_bytes(8, 3000)); return 0; }\n",
    )
    .unwrap();
    clang(p, &["amd.c", "-o", "amd"]);
    let o = Command::new(p.join("amd")).output().unwrap();
    assert_eq!(text(&o.stdout).trim(), "4096 12288");
    // NVIDIA: the static arrays come first in the same block.
    std::fs::write(
        p.join("nv.c"),
        "#include <stdio.h>\n#include \"nv.h\"\nint main(void) { printf(\"%lld\\n\", \
         (long long)(softmax_row_lds_shared_bytes(8, 3000) - softmax_row_lds_shared_bytes(8, 1000))); return 0; }\n",
    )
    .unwrap();
    clang(p, &["nv.c", "-o", "nv"]);
    let o = Command::new(p.join("nv")).output().unwrap();
    assert_eq!(text(&o.stdout).trim(), "8192");
}

/// A 4-D map of sizes without `max`: the header's `_fits` says whether
/// sizes keep its fused loop within its 32-bit counter, and `_run`
/// refuses sizes that do not (before touching the buffers) and computes
/// the others.
const UNBOUNDED: &str = r#"[kernel]
name = "add4"
sizes = ["B", "H", "S", "D"]

[inputs]
X = { dtype = "f32", shape = ["B", "H", "S", "D"] }

[[stage]]
compute = "O[b, h, s, d] = X[b, h, s, d] + 1.0"
shape = ["B", "H", "S", "D"]
"#;

const UNBOUNDED_MAIN: &str = r#"#include <stdio.h>
#include "add4.h"
int main(void) {
    float x[2 * 3 * 5 * 7], o[2 * 3 * 5 * 7];
    for (int i = 0; i < 2 * 3 * 5 * 7; i++) { x[i] = (float)i; o[i] = -1.0f; }
    if (!add4_fits(2, 3, 5, 7)) { puts("small sizes do not fit"); return 1; }
    if (add4_fits(65536, 65536, 2, 1)) { puts("2^33 fits"); return 1; }
    if (add4_fits(2147483647, 2147483647, 2147483647, 1)) { puts("2^93 fits"); return 1; }
    if (add4_run(x, o, 65536, 65536, 2, 1) != -1) { puts("2^33 ran"); return 1; }
    if (o[0] != -1.0f) { puts("a refused run wrote"); return 1; }
    if (add4_run(x, o, 2, 3, 5, 7) != 0) { puts("refused"); return 1; }
    for (int i = 0; i < 2 * 3 * 5 * 7; i++)
        if (o[i] != (float)i + 1.0f) { printf("o[%d] = %g\n", i, o[i]); return 1; }
    puts("ok");
    return 0;
}
"#;

#[test]
fn headers_check_the_launch_requirements_of_sizes_without_max() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path();
    std::fs::write(p.join("add4.toml"), UNBOUNDED).unwrap();
    let o = rocmc(
        p,
        &[
            "build",
            "-q",
            "--mcpu",
            "x86-64",
            "--emit",
            "so,header",
            "add4.toml",
            "-o",
            "libadd4.so",
        ],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    std::fs::rename(p.join("libadd4.h"), p.join("add4.h")).unwrap();
    let h = std::fs::read_to_string(p.join("add4.h")).unwrap();
    assert!(h.contains("<= 4294967295 (loop `"), "{h}");
    std::fs::write(p.join("main.c"), UNBOUNDED_MAIN).unwrap();
    clang(
        p,
        &[
            "main.c",
            "-o",
            "main",
            "-L.",
            "-ladd4",
            "-Wl,-rpath,$ORIGIN",
        ],
    );
    let o = Command::new(p.join("main")).output().unwrap();
    assert_eq!(text(&o.stdout).trim(), "ok", "{}", text(&o.stderr));
}
