//! Gathers: subscripts that read other tensors (`table[ids[t], j]`). The
//! interpreter defines them (data subscripts clamped into their dimension,
//! an empty tensor reads as zero); the lowered loop IR, the CPU path and
//! every GPU back end must agree, whatever the data.

use crate::common::*;
use rocmc::ir::interp::{self, Buffer, Data};
use rocmc::ir::DType;

/// Embedding-like, nested, multi-dimensional, mixed with reductions and
/// other stages, under schedules with guards, vectors and LDS: the files of
/// tests/gather/ (also checked on the GPU by scripts/gpu-focus.sh).
fn kernels() -> Vec<(String, String)> {
    let v = kernel_files("gather");
    assert!(v.len() >= 5, "tests/gather/ lost its kernels");
    v
}

fn kernel(name: &str) -> String {
    std::fs::read_to_string(root().join("tests/gather").join(format!("{name}.toml"))).unwrap()
}

const SIZES: &[i64] = &[1, 2, 7, 33, 100];
const AMD: &[&str] = &["gfx90a", "gfx942", "gfx1100", "gfx1201"];
const NVIDIA: &[&str] = &["sm_52", "sm_80", "sm_90"];

#[test]
fn gathers_agree_with_the_interpreter_on_the_cpu() {
    check_on_the_cpu(&kernels(), SIZES);
}

#[test]
fn gathers_lower_to_their_meaning() {
    check_lowered(&kernels(), SIZES);
}

#[test]
fn gathers_compile_for_every_target() {
    compile_everywhere(&kernels(), AMD, NVIDIA);
}

fn ints(t: DType, v: &[i64]) -> Buffer {
    Buffer {
        dtype: t,
        data: Data::I(v.to_vec()),
    }
}

fn floats(t: DType, v: &[f64]) -> Buffer {
    Buffer {
        dtype: t,
        data: Data::F(v.to_vec()),
    }
}

/// The definition, on chosen data: in range, below, above, and the report
/// of the first clamped access.
#[test]
fn out_of_range_subscripts_are_clamped_and_reported() {
    let k = rocmc::ir::parse_kernel("rows", &kernel("rows")).unwrap();
    let ids = ints(DType::I32, &[1, -5, 2, 1000]);
    let table = floats(DType::F32, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let (out, clamped) = interp::run_reporting(&k, &[4, 3, 2], &[], &[ids, table]).unwrap();
    assert_eq!(
        out[2].data,
        Data::F(vec![6.0, 8.0, 2.0, 4.0, 10.0, 12.0, 10.0, 12.0])
    );
    let c = clamped.expect("reported");
    assert_eq!(
        (c.tensor.as_str(), c.index.as_slice()),
        ("table", &[-5, 0][..])
    );
    assert!(c.to_string().contains("table[-5, 0]"), "{c}");
}

/// The CPU path on the same chosen data, and on an empty table: every
/// element zero, nothing read (the table's buffer is empty).
#[test]
fn compiled_gathers_clamp_and_read_nothing_from_an_empty_table() {
    let front = rocmc::frontend("rows", &kernel("rows")).unwrap();
    let run = |sizes: [i32; 3], ids: &[i32], table: &[f32]| -> Vec<f32> {
        let n = (sizes[0] * sizes[2]) as usize;
        let mut bufs = vec![
            ids.iter()
                .flat_map(|x| x.to_le_bytes())
                .collect::<Vec<u8>>(),
            table.iter().flat_map(|x| x.to_le_bytes()).collect(),
            vec![0xffu8; n * 4],
        ];
        rocmc::codegen::host::run_on_host(
            &front.kernel,
            &front.program,
            &sizes,
            &[],
            &mut bufs,
            false,
        )
        .unwrap();
        bufs[2]
            .chunks(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    };
    assert_eq!(
        run(
            [4, 3, 2],
            &[1, -5, 2, 1000],
            &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
        ),
        [6.0, 8.0, 2.0, 4.0, 10.0, 12.0, 10.0, 12.0]
    );
    assert_eq!(run([3, 0, 5], &[0, 7, -1], &[]), [0.0; 15]);
}

/// The clamp survives optimisation on every GPU back end (LLVM may not
/// drop it as it could if the subscript were trusted).
#[test]
fn the_clamp_is_in_the_generated_code() {
    let src = kernel("shifted");
    for t in ["gfx942", "sm_90"] {
        let emit = rocmc::Emit {
            llvm: true,
            ..Default::default()
        };
        let art = rocmc::compile("shifted", &src, &rocmc::Options::new(t), emit).unwrap();
        let ir = &art.llvm_ir;
        assert!(
            ir.contains("@llvm.smin.i32") && ir.contains("@llvm.smax.i32"),
            "{t}:\n{ir}"
        );
        assert!(
            ir.contains("rocmc_zero_as"),
            "{t}: no empty-tensor select\n{ir}"
        );
    }
}

/// With a constant row width, a vectorized gather of rows is one 16-byte
/// load per thread on both vendors (the example's point).
#[test]
fn the_embedding_example_gathers_16_bytes_per_thread() {
    let src = std::fs::read_to_string(example("embedding")).unwrap();
    let (asm, _) = amd_code("embedding.toml", &src, "gfx942");
    assert!(asm.contains("global_load_dwordx4"), "{asm}");
    let ptx = ptx_of("embedding.toml", &src, "sm_90");
    assert!(ptx.contains("ld.global.nc.v4.b32"), "{ptx}");
}

/// `cache_read` of a gathered tensor: each work-group's gathered row
/// (`table[ids[t], 0..D]`, D bounded by `max`) copied once into LDS, the
/// gather clamping its subscript in the copy, every thread reading the tile.
#[test]
fn a_gathered_row_is_staged_once_per_work_group() {
    let src = kernel("gathered_tile");
    let loops = rocmc::compile(
        "gathered_tile",
        &src,
        &rocmc::Options::new("gfx942"),
        rocmc::Emit::default(),
    )
    .unwrap()
    .loops;
    assert!(loops.contains("lds RS: f32[1024]"), "{loops}");
    assert!(loops.contains("= table[clamp(ids[t]), "), "{loops}");
    assert!(loops.contains("(RS[c] * W["), "{loops}");
    assert_eq!(loops.matches("table[").count(), 1, "{loops}");
    // A row that changes with a thread index has no single gathered row.
    let per_thread = src
        .replace(
            "\"bind(t, blockIdx.y)\"",
            "\"to, ti = split(t, 2)\", \"bind(to, blockIdx.y)\", \"bind(ti, threadIdx.y)\"",
        )
        .replace(
            "cache_read(table, shared, t)",
            "cache_read(table, shared, to)",
        );
    let Err(e) = rocmc::compile(
        "k",
        &per_thread,
        &rocmc::Options::new("gfx942"),
        rocmc::Emit::default(),
    ) else {
        panic!("accepted")
    };
    let e = e.to_string();
    assert!(
        e.contains("gathered subscript 0") && e.contains("changes inside `to`"),
        "{e}"
    );
    let vec = src.replace(
        "cache_read(table, shared, t)",
        "cache_read(table, shared, t, vec=4)",
    );
    let Err(e) = rocmc::compile(
        "k",
        &vec,
        &rocmc::Options::new("gfx942"),
        rocmc::Emit::default(),
    ) else {
        panic!("accepted")
    };
    let e = e.to_string();
    assert!(e.contains("`vec` does not apply"), "{e}");
}

/// A paged cache's page staged per page step: `kv[page[b, p / 16], p % 16,
/// d]` with `p` split by 16 gathers one page for all 16 rows of the step
/// (the division by 16 of `po * 16 + pi` is `po`), and the page's rows
/// are the tile's rows.
#[test]
fn a_paged_caches_page_is_one_gathered_tile() {
    let src = kernel("paged_tile");
    let loops = rocmc::compile(
        "paged_tile",
        &src,
        &rocmc::Options::new("gfx942"),
        rocmc::Emit::default(),
    )
    .unwrap()
    .loops;
    assert!(loops.contains("lds KS: f32[1024]"), "{loops}");
    assert!(
        loops.contains("kv[clamp(page[b, (po * 16) / 16]), "),
        "{loops}"
    );
    assert!(loops.contains("KS[(pi * 64) + d]"), "{loops}");
    // Split by 8, a step reads half a page, which still has one page; split
    // by 32 it reads two pages, which is refused.
    let half = src.replace("split(p, 16)", "split(p, 8)");
    rocmc::compile(
        "k",
        &half,
        &rocmc::Options::new("gfx942"),
        rocmc::Emit::default(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let two = src.replace("split(p, 16)", "split(p, 32)");
    let Err(e) = rocmc::compile(
        "k",
        &two,
        &rocmc::Options::new("gfx942"),
        rocmc::Emit::default(),
    ) else {
        panic!("two pages in one tile were accepted")
    };
    assert!(e.to_string().contains("changes inside `po`"), "{e}");
}
