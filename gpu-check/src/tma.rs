//! `rocmc-gpu-check tma`: the tensor memory accelerator's copy of a box
//! as rocmc lays the tile out (`cache_read(..., swizzle=128, tma=1)`),
//! against a real Hopper GPU.
//!
//! For each case a tensor whose every element holds its own index is
//! uploaded; a hand-written PTX kernel, launched through the CUDA runtime
//! (which encodes the tensor map from the launch document, as for every
//! rocmc kernel with `tma=1`), has one thread issue one
//! `cp.async.bulk.tensor` of a box into 1024-byte-aligned shared memory,
//! waits on the mbarrier, and stores the shared bytes verbatim. The host
//! reads them back through rocmc's layout — the box's row `r` at `r * 128`
//! bytes, its 16-byte chunk `c` at chunk `c ^ r % 8` (or the 64- and
//! 32-byte swizzles' rows and permutations) — and expects each
//! element of the tensor where the box covers it and zero past the
//! tensor's edges. So the runtime's map (extents, strides, box, swizzle),
//! the coordinates' order and the layout rocmc's lowering assumes are
//! each checked, element by element; `--perturb` expects chunk `c ^ (r +
//! 1) % 8` instead and must make every case fail.

use crate::Res;
use rocmc_device::Arg;

/// One copy: a tensor of `rows` x `cols` elements of `esize` bytes, the
/// box of `box_rows` rows (and `span` bytes a row: the swizzle's) from
/// (`y`, `x`).
struct Case {
    dtype: &'static str,
    esize: usize,
    rows: usize,
    cols: usize,
    box_rows: usize,
    y: usize,
    x: usize,
    span: usize,
}

/// `dtype` (of `esize` bytes), `[rows, cols]`, `box_rows`, from `[y, x]`,
/// `span`.
type Spec = (&'static str, usize, [usize; 2], usize, [usize; 2], usize);

const SPECS: &[Spec] = &[
    // f16: whole boxes inside, and one past both edges.
    ("f16", 2, [300, 200], 128, [0, 0], 128),
    ("f16", 2, [300, 200], 128, [64, 64], 128),
    ("f16", 2, [300, 200], 128, [256, 160], 128),
    ("f16", 2, [70, 64], 256, [0, 0], 128),
    // Bytes (int8, fp8): 128 a row. Any first row, but the first column
    // 16-byte aligned: an unaligned one (200) faulted with an illegal
    // instruction (h100-tma-2), which lowering refuses.
    ("u8", 1, [100, 272], 64, [0, 128], 128),
    ("u8", 1, [100, 272], 64, [37, 208], 128),
    // 4-byte elements: 32 a row.
    ("u32", 4, [70, 36], 8, [65, 16], 128),
    // The narrower swizzles: 64 bytes (4 chunks, `c ^ (r / 2) % 4`) and
    // 32 (2 chunks, `c ^ (r / 4) % 2`).
    ("f16", 2, [300, 200], 64, [250, 176], 64),
    ("u8", 1, [100, 48], 32, [3, 32], 32),
];

fn cases() -> Vec<Case> {
    SPECS
        .iter()
        .map(
            |&(dtype, esize, [rows, cols], box_rows, [y, x], span)| Case {
                dtype,
                esize,
                rows,
                cols,
                box_rows,
                y,
                x,
                span,
            },
        )
        .collect()
}

fn ptx(c: &Case) -> String {
    let bytes = c.box_rows * c.span;
    let launch = format!(
        r#"// rocmc.launch {{"version":1,"sizes":[{{"name":"R","max":100000}},{{"name":"C","max":100000}},{{"name":"Y","max":100000}},{{"name":"X","max":100000}},{{"name":"N","max":32768}}],"kernels":[{{"name":"tma","block":[128,1,1],"grid":[{{"const":1}},{{"const":1}},{{"const":1}}],"grid_text":["1","1","1"],"args":[{{"name":"A","role":"buffer","dtype":"{}","shape":[{{"size":"R"}},{{"size":"C"}}]}},{{"name":"O","role":"buffer","dtype":"u8","shape":[{{"size":"N"}}],"written":true}},{{"name":"R","role":"size","dtype":"i32"}},{{"name":"C","role":"size","dtype":"i32"}},{{"name":"Y","role":"size","dtype":"i32"}},{{"name":"X","role":"size","dtype":"i32"}},{{"name":"N","role":"size","dtype":"i32"}}],"tensor_maps":[{{"arg":0,"boxed":[{},{}],"swizzle":{}}}]}}]}}"#,
        c.dtype,
        c.box_rows,
        c.span / c.esize,
        c.span
    );
    format!(
        r#"{launch}
.version 8.0
.target sm_90a
.address_size 64
.shared .align 1024 .b8 buf[{bytes}];
.shared .align 8 .b64 bar;
.visible .entry tma(.param .u64 pa, .param .u64 po, .param .u32 pr, .param .u32 pc, .param .u32 py, .param .u32 px, .param .u32 pn, .param .u64 pmaps)
{{
  .reg .b32 t, y, x, n, i, off, v, sh;
  .reg .b64 maps, o, g;
  .reg .pred p, done;
  ld.param.u64 maps, [pmaps];
  ld.param.u64 o, [po];
  cvta.to.global.u64 o, o;
  ld.param.u32 y, [py];
  ld.param.u32 x, [px];
  ld.param.u32 n, [pn];
  mov.u32 t, %tid.x;
  setp.ne.u32 p, t, 0;
  @p bra SYNC;
  mbarrier.init.shared::cta.b64 [bar], 1;
  fence.mbarrier_init.release.cluster;
  mbarrier.arrive.expect_tx.shared::cta.b64 _, [bar], {bytes};
  cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [buf], [maps, {{x, y}}], [bar];
SYNC:
  bar.sync 0;
WAIT:
  mbarrier.try_wait.parity.shared::cta.b64 done, [bar], 0;
  @!done bra WAIT;
  mov.u32 i, t;
LOOP:
  shl.b32 off, i, 2;
  setp.ge.u32 p, off, n;
  @p bra END;
  mov.u32 sh, buf;
  add.u32 sh, sh, off;
  ld.shared.b32 v, [sh];
  cvt.u64.u32 g, off;
  add.s64 g, o, g;
  st.global.b32 [g], v;
  add.u32 i, i, 128;
  bra LOOP;
END:
  ret;
}}
"#
    )
}

/// The tensor's bytes: element `e` (row-major) holds `e + 1` in its low
/// bytes (so that zero means "past the tensor"), truncated to its size.
fn tensor(c: &Case) -> Vec<u8> {
    (0..c.rows * c.cols)
        .flat_map(|e| ((e + 1) as u32).to_le_bytes()[..c.esize].to_vec())
        .collect()
}

/// The box's bytes as rocmc's layout places them: byte `b` of row `r`
/// (at `r * span + b`) holds chunk `b / 16 ^ (r / d) % p` of the box's
/// row `r`, with `p` chunks a row and `d = 8 / p` (128 bytes: `r % 8`);
/// `(r / d + 1) % p` when perturbed; zero past the tensor.
fn expected(c: &Case, data: &[u8], perturb: bool) -> Vec<u8> {
    let mut out = vec![0u8; c.box_rows * c.span];
    let p = c.span / 16;
    for r in 0..c.box_rows {
        for b in 0..c.span {
            let shift = (r / (8 / p) + usize::from(perturb)) % p;
            let logical = ((b / 16) ^ shift) * 16 + b % 16;
            let (row, col) = (c.y + r, c.x + logical / c.esize);
            if row < c.rows && col < c.cols {
                out[r * c.span + b] = data[(row * c.cols + col) * c.esize + logical % c.esize];
            }
        }
    }
    out
}

/// Checks each case on device 0 (an sm_90 GPU); a Markdown table.
pub fn check(args: &[String]) -> Res<bool> {
    let perturb = args.iter().any(|a| a == "--perturb");
    let mut dev = rocmc_runtime::open_local("cuda:0").map_err(|e| e.to_string())?;
    let e = |e: rocmc_device::Error| e.to_string();
    println!("| element | tensor | box | swizzle | from (row, col) | bytes differing | result |");
    println!("|---|---|---|---|---|---|---|");
    let mut all = true;
    for c in &cases() {
        let module = dev.load_module(ptx(c).as_bytes()).map_err(e)?;
        let data = tensor(c);
        let da = dev.upload(&data).map_err(e)?;
        let n = c.box_rows * c.span;
        let dout = dev.alloc(n as u64).map_err(e)?;
        let size = |v: usize| Arg::Size(v as i32);
        let buf = |id, dtype: &str, len: usize| Arg::Buffer {
            id,
            dtype: dtype.into(),
            len: len as u64,
            offset: 0,
        };
        let args = [
            buf(da, c.dtype, c.rows * c.cols),
            buf(dout, "u8", n),
            size(c.rows),
            size(c.cols),
            size(c.y),
            size(c.x),
            size(n),
        ];
        dev.launch(&module, "tma", &args).map_err(e)?;
        let got = dev.read_all(dout).map_err(e)?;
        for id in [da, dout] {
            dev.free(id).map_err(e)?;
        }
        let want = expected(c, &data, perturb);
        let wrong = got.iter().zip(&want).filter(|(g, w)| g != w).count();
        all &= wrong == 0;
        println!(
            "| {} | {} x {} | {} x {} | {} B | ({}, {}) | {wrong} of {n} | {} |",
            c.dtype,
            c.rows,
            c.cols,
            c.box_rows,
            c.span / c.esize,
            c.span,
            c.y,
            c.x,
            if wrong == 0 { "exact" } else { "WRONG" }
        );
    }
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocmc_device::launch::ArgValue;

    /// The kernels ptxas assembles (wherever it is installed).
    #[test]
    fn every_kernel_assembles_for_sm_90a() {
        let Some(ptxas) = crate::test_ptxas() else {
            return;
        };
        let dir = std::env::temp_dir().join("rocmc-gpu-check-tma");
        std::fs::create_dir_all(&dir).unwrap();
        for c in &cases() {
            let f = dir.join("k.ptx");
            std::fs::write(&f, ptx(c)).unwrap();
            let out = std::process::Command::new(&ptxas)
                .args(["-arch", "sm_90a", "-o"])
                .arg(dir.join("k.cubin"))
                .arg(&f)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }

    /// Each case's launch document parses, names its map and swizzle, and
    /// the runtime accepts its extents (rows a multiple of 16 bytes).
    #[test]
    fn every_case_is_a_launch_the_runtime_takes() {
        for c in &cases() {
            let info = rocmc_device::module_launch(ptx(c).as_bytes()).unwrap();
            let k = &info.kernels[0];
            let m = &k.tensor_maps[0];
            assert_eq!(m.boxed, [c.box_rows as u32, (c.span / c.esize) as u32]);
            assert_eq!(m.swizzle, c.span as u32);
            let (name, _) = rocmc_device::known_dtype(c.dtype).unwrap();
            let n = c.box_rows * c.span;
            let args = [
                ArgValue::Buffer {
                    dtype: name,
                    len: c.rows * c.cols,
                },
                ArgValue::Buffer {
                    dtype: "u8",
                    len: n,
                },
                ArgValue::Size(c.rows as i32),
                ArgValue::Size(c.cols as i32),
                ArgValue::Size(c.y as i32),
                ArgValue::Size(c.x as i32),
                ArgValue::Size(n as i32),
            ];
            info.check_args(k, &args).unwrap();
            let shapes = info.tensor_map_shapes(k, &args).unwrap();
            assert_eq!(shapes[0].dims, [c.rows as u64, c.cols as u64]);
            // Every box starts on 16 bytes of its row (see SPECS).
            assert_eq!(c.x * c.esize % 16, 0);
        }
    }

    /// The expected layout is the swizzle, and the perturbed one differs
    /// from it wherever the tensor has data.
    #[test]
    fn the_expected_layout_is_the_swizzle() {
        let all = cases();
        let c = &all[0];
        let data = tensor(c);
        let want = expected(c, &data, false);
        // Row 3's chunk 2 (elements 16..24) sits at chunk 2 ^ 3 = 1.
        let at = 3 * 128 + 16;
        let e = u16::from_le_bytes([want[at], want[at + 1]]);
        assert_eq!(e as usize, 3 * c.cols + 16 + 1);
        assert_ne!(want, expected(c, &data, true));
        // 64-byte rows: row 5's chunk 1 sits at chunk 1 ^ (5 / 2) % 4 = 3.
        let c = &all[7];
        assert_eq!(c.span, 64);
        let data = tensor(c);
        let want = expected(c, &data, false);
        let at = 5 * 64 + 3 * 16;
        let e = u16::from_le_bytes([want[at], want[at + 1]]) as usize;
        assert_eq!(e, (c.y + 5) * c.cols + c.x + 8 + 1);
    }
}
